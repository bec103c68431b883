"""Measure 5: peer session stores driven through their public APIs with the same workload.

* Google ADK ``DatabaseSessionService``: ``append_event`` one event at a time (it has no
  batch append), ``get_session`` in full and with ``GetSessionConfig(num_recent_events=50)``.
* OpenAI Agents SDK ``SQLAlchemySession``: ``add_items`` (one workload event may be two
  items: an assistant message and its function call), ``get_items()`` and
  ``get_items(limit=50)``; ``add_items`` of a 1,000-event batch for the batch measure.

Each peer runs with its own defaults on its own empty database. A peer that is not
installed, or that fails, is skipped with the reason in the report.
"""

from __future__ import annotations

import asyncio
import importlib.util
import time
from collections.abc import Awaitable, Callable
from typing import Any

from .harness import Recorder, Settings, log, median, percentile
from .raw import pg_analyze
from .workload import Step, step

__all__ = ["PEERS", "run_peers", "peer_available"]

ADK = "google-adk"
OPENAI = "openai-agents"
PEERS = (ADK, OPENAI)
RECENT = 50
WARMUP = 3
_MODULES = {ADK: "google.adk.sessions", OPENAI: "agents.extensions.memory"}


def peer_available(peer: str) -> str | None:
    """None when the peer can be imported, else why not."""
    try:
        found = importlib.util.find_spec(_MODULES[peer]) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return f"{peer} is not installed (pip install -e '.[bench]' to include it)"
    return None


def _ms(seconds: float) -> float:
    return round(seconds * 1_000, 4)


# --------------------------------------------------------------------------- adapters


class _AdkAdapter:
    name = ADK

    def __init__(self, url: str) -> None:
        from google.adk.sessions import DatabaseSessionService

        self.svc = DatabaseSessionService(db_url=url)
        self.url = url
        self.session: Any = None

    async def open(self) -> None:
        self.session = await self.svc.create_session(app_name="bench", user_id="user")

    def _event(self, s: Step) -> Any:
        from google.adk.events import Event
        from google.genai import types

        if s.kind == "user":
            content = types.Content(role="user", parts=[types.Part(text=s.text)])
            author = "user"
        elif s.kind == "assistant":
            content = types.Content(role="model", parts=[types.Part(text=s.text)])
            author = "assistant"
        elif s.kind == "call":
            import json

            call = types.FunctionCall(
                id=s.call_id, name=s.tool_name, args=json.loads(s.arguments or "{}")
            )
            content = types.Content(
                role="model", parts=[types.Part(text=s.text), types.Part(function_call=call)]
            )
            author = "assistant"
        else:
            resp = types.FunctionResponse(
                id=s.call_id, name=s.tool_name, response={"output": s.text}
            )
            content = types.Content(role="user", parts=[types.Part(function_response=resp)])
            author = "assistant"
        return Event(author=author, invocation_id=f"inv-{s.seq // 5}", content=content)

    async def append(self, s: Step) -> None:
        await self.svc.append_event(self.session, self._event(s))

    async def append_batch(self, batch: list[Step]) -> None:
        for s in batch:
            await self.append(s)

    batch_api = False

    async def read_all(self) -> int:
        got = await self.svc.get_session(
            app_name="bench", user_id="user", session_id=self.session.id
        )
        return len(got.events) if got else 0

    async def read_recent(self) -> int:
        from google.adk.sessions.base_session_service import GetSessionConfig

        got = await self.svc.get_session(
            app_name="bench",
            user_id="user",
            session_id=self.session.id,
            config=GetSessionConfig(num_recent_events=RECENT),
        )
        return len(got.events) if got else 0

    async def close(self) -> None:
        await self.svc.close()


class _OpenAIAdapter:
    name = OPENAI
    batch_api = True

    def __init__(self, url: str) -> None:
        from agents.extensions.memory import SQLAlchemySession

        self._cls = SQLAlchemySession
        self.url = url
        self.session: Any = None

    async def open(self) -> None:
        self.session = self._cls.from_url("bench-session", url=self.url, create_tables=True)

    @staticmethod
    def _items(s: Step) -> list[dict[str, Any]]:
        if s.kind == "user":
            return [{"role": "user", "content": s.text}]
        message = {
            "type": "message",
            "role": "assistant",
            "id": f"msg_{s.seq}",
            "status": "completed",
            "content": [{"type": "output_text", "text": s.text, "annotations": []}],
        }
        if s.kind == "assistant":
            return [message]
        if s.kind == "call":
            call = {
                "type": "function_call",
                "call_id": s.call_id,
                "name": s.tool_name,
                "arguments": s.arguments or "",
            }
            return [message, call]
        return [{"type": "function_call_output", "call_id": s.call_id, "output": s.text}]

    async def append(self, s: Step) -> None:
        await self.session.add_items(self._items(s))

    async def append_batch(self, batch: list[Step]) -> None:
        await self.session.add_items([i for s in batch for i in self._items(s)])

    async def read_all(self) -> int:
        return len(await self.session.get_items())

    async def read_recent(self) -> int:
        return len(await self.session.get_items(limit=RECENT))

    async def close(self) -> None:
        engine = getattr(self.session, "_engine", None) or getattr(self.session, "engine", None)
        if engine is not None:
            await engine.dispose()


# --------------------------------------------------------------------------- measures


async def _timed(fn: Callable[[], Awaitable[Any]]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = await fn()
    return time.perf_counter() - t0, out


async def _run_peer(adapter: Any, settings: Settings, rec: Recorder, be: str) -> None:
    name = adapter.name
    await adapter.open()
    head = 0
    for size in settings.peer_sizes:
        t0 = time.perf_counter()
        if head < size:
            if adapter.batch_api:
                while head < size:
                    last = min(size, head + settings.batch)
                    await adapter.append_batch([step(s) for s in range(head + 1, last + 1)])
                    head = last
            else:
                await adapter.append_batch([step(s) for s in range(head + 1, size + 1)])
                head = size
            log(f"{be}: {name} grew to {head} events in {time.perf_counter() - t0:.1f}s")
        if adapter.url.startswith("postgresql"):
            # Same treatment as the store: fresh statistics before timing.
            pg_analyze(adapter.url)
        for _ in range(WARMUP):
            head += 1
            await adapter.append(step(head))
        for rep in range(settings.reps):
            lat = []
            for _ in range(settings.single_appends):
                head += 1
                s = step(head)
                took, _ = await _timed(lambda s=s: adapter.append(s))
                lat.append(took)
            rec.add(
                "append_single",
                be,
                name,
                size,
                rep,
                median_ms=_ms(median(lat)),
                p95_ms=_ms(percentile(lat, 0.95)),
                latencies_ms=[_ms(x) for x in lat],
            )
        await adapter.read_recent()
        await adapter.read_all()
        for rep in range(settings.reps):
            took, n = await _timed(adapter.read_all)
            rec.add("peer_read", be, f"{name} full", size, rep, ms=_ms(took), items=n)
            took, n = await _timed(adapter.read_recent)
            rec.add("peer_read", be, f"{name} last {RECENT}", size, rep, ms=_ms(took), items=n)
        log(
            f"{be}: {name} at {size}: append "
            f"{rec.med('median_ms', 'append_single', be, name, size):.2f} ms, full read "
            f"{rec.med('ms', 'peer_read', be, f'{name} full', size):.1f} ms, last {RECENT} "
            f"{rec.med('ms', 'peer_read', be, f'{name} last {RECENT}', size):.2f} ms"
        )
    if adapter.batch_api:
        n = settings.batch
        for rep in range(-1, settings.batch_reps):
            batch = [step(s) for s in range(head + 1, head + n + 1)]
            took, _ = await _timed(lambda b=batch: adapter.append_batch(b))
            head += n
            if rep >= 0:
                rec.add(
                    "append_batch", be, name, n, rep, ms=_ms(took), events_per_s=round(n / took, 1)
                )
    await adapter.close()


def run_peers(urls: dict[str, str], settings: Settings, rec: Recorder, be: str) -> None:
    """Measure every available peer on backend ``be`` (URLs keyed by peer name)."""
    adapters = {ADK: _AdkAdapter, OPENAI: _OpenAIAdapter}
    for peer in PEERS:
        why = peer_available(peer)
        if why:
            rec.note(f"{be}: skipped {peer}: {why}")
            continue
        log(f"{be}: {peer}")
        try:
            asyncio.run(_run_peer(adapters[peer](urls[peer]), settings, rec, be))
        except Exception as exc:  # a peer's failure must not sink the whole run
            rec.note(f"{be}: {peer} failed: {type(exc).__name__}: {exc}"[:500])
