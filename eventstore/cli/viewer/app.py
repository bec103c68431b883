"""The audit viewer: a read-only Starlette application over one :class:`EventStore`.

Routes (GET only; any other method answers 405, unknown sessions and seqs a 404 page):

``/``
    Sessions of the tenant with a text filter and their forks nested under them; each row's
    token and condensation counts are loaded with htmx.
``/sessions/{id}``
    The token chart and the timeline, a page of events at a time (``?after=SEQ``,
    ``?kind=K``); each row expands to the full event with htmx.
``/sessions/{id}/view?at=N``
    The view at seq N, its exact messages, tokens against the budget, its fingerprint
    (the string ``eventstore view ID --at N --json`` prints) and a diff against the view
    sent at the previous llm call.
``/sessions/{id}/events/{seq}``
    One event in full; a condensation lists what it forgot, a prune each original part.
``/sessions/{id}/verify``
    :meth:`EventStore.verify` (in a background thread for big sessions) and its findings.
``/sessions/{id}/export.jsonl``
    :func:`eventstore.importers.export_jsonl`, byte for byte as ``eventstore export``.
"""

from __future__ import annotations

import difflib
import json
import queue
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

from eventstore.events import EventKind

from ..render import event_preview, event_role, one_line, time_str
from .charts import token_chart
from .digest import INLINE_LIMIT, Digest, Digests

if TYPE_CHECKING:
    from eventstore import EventStore, Session, StoredEvent, VerifyReport, View

HERE = Path(__file__).resolve().parent
PAGE_SIZE = 100
SESSIONS_PAGE = 100
#: Every event kind, for the log's filter (the union's discriminators, in declaration order).
KINDS: list[str] = list(get_args(EventKind))


class _GetOnly:
    """Answer 405 to anything but GET and HEAD, on every path: the viewer never writes."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] not in ("GET", "HEAD"):
            response = PlainTextResponse(
                "405 Method Not Allowed: the audit viewer is read-only",
                status_code=405,
                headers={"Allow": "GET, HEAD"},
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


class Viewer:
    """The routes, bound to one store."""

    def __init__(self, store: EventStore, *, inline_limit: int = INLINE_LIMIT) -> None:
        self.store = store
        self.inline_limit = inline_limit
        self.digests = Digests(store, inline_limit)
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        self.templates.env.filters["short_time"] = time_str
        self._verify_lock = threading.Lock()
        self._verify_jobs: dict[str, dict[str, Any]] = {}
        self._budgets: dict[str, int | None] = {}

    # -- helpers

    def page(self, request: Request, name: str, status: int = 200, **ctx: Any) -> Response:
        return self.templates.TemplateResponse(request, name, ctx, status_code=status)

    def session(self, sid: str) -> Session:
        from eventstore import NotFoundError

        try:
            return self.store.get_session(sid)
        except NotFoundError:
            raise HTTPException(
                404, f"no session {sid!r} for tenant {self.store.tenant!r}"
            ) from None

    def event(self, s: Session, seq: int) -> StoredEvent:
        if not 1 <= seq <= s.head_seq:
            raise HTTPException(404, f"no event at seq {seq} in session {s.id}")
        found = list(self.store.read(s.id, seq, seq))
        if not found:
            raise HTTPException(404, f"no event at seq {seq} in session {s.id}")
        return found[0]

    def budget(self, model: str | None) -> int | None:
        if model is None:
            return None
        if model not in self._budgets:
            from eventstore import Budget, ModelInfo

            known = ModelInfo.find(model) is not None
            self._budgets[model] = Budget.for_model(model).available if known else None
        return self._budgets[model]

    # -- sessions

    def index(self, request: Request) -> Response:
        q = request.query_params.get("q", "").strip()
        page = _int_param(request, "page", 1, low=1)
        found = self.store.list_sessions(limit=None)
        if q:
            needle = q.lower()
            found = [s for s in found if needle in _haystack(s)]
        total = len(found)
        start = (page - 1) * SESSIONS_PAGE
        shown = _fork_tree(found[start : start + SESSIONS_PAGE])
        return self.page(
            request,
            "index.html",
            rows=shown,
            q=q,
            page=page,
            total=total,
            more=start + SESSIONS_PAGE < total,
            tenant=self.store.tenant,
        )

    def session_row(self, request: Request) -> Response:
        s = self.session(request.path_params["sid"])
        digest = self.digests.get(s.id, s.head_seq)
        view_tokens = self.store.view(s.id).tokens if digest is not None else None
        depth = _int_param(request, "depth", 0, low=0)
        return self.page(request, "_row.html", s=s, d=digest, view_tokens=view_tokens, depth=depth)

    # -- timeline

    def timeline(self, request: Request) -> Response:
        s = self.session(request.path_params["sid"])
        kind = request.query_params.get("kind") or ""
        if kind and kind not in KINDS:
            raise HTTPException(400, f"unknown kind {kind!r}; use one of {', '.join(KINDS)}")
        after = _int_param(request, "after", 0, low=0)
        return self.page(request, "session.html", s=s, kind=kind, kinds=KINDS, after=after)

    def chart(self, request: Request) -> Response:
        s = self.session(request.path_params["sid"])
        digest = self.digests.get(s.id, s.head_seq)
        if digest is None:
            done, target, elapsed, error = self.digests.progress(s.id)
            return self.page(
                request,
                "_pending.html",
                what="reading the log for the chart",
                done=done,
                target=target,
                elapsed=elapsed,
                error=error,
                url=f"/sessions/{s.id}/chart",
            )
        budget = self.budget(digest.model)
        svg = token_chart(digest, s.id, budget)
        return self.page(request, "_chart.html", s=s, d=digest, svg=svg, budget=budget)

    def events(self, request: Request) -> Response:
        s = self.session(request.path_params["sid"])
        kind = request.query_params.get("kind") or None
        if kind is not None and kind not in KINDS:
            raise HTTPException(400, f"unknown kind {kind!r}; use one of {', '.join(KINDS)}")
        after = _int_param(request, "after", 0, low=0)
        rows: list[StoredEvent] = []
        for stored in self.store.read(s.id, after + 1, s.head_seq, kinds=[kind] if kind else None):
            rows.append(stored)
            if len(rows) >= PAGE_SIZE:
                break
        marks = self._marks(s, rows)
        more = bool(rows) and rows[-1].seq < s.head_seq and len(rows) == PAGE_SIZE
        return self.page(
            request,
            "_events.html",
            s=s,
            rows=marks,
            kind=kind or "",
            more=more,
            next_after=rows[-1].seq if rows else after,
        )

    def _marks(self, s: Session, rows: list[StoredEvent]) -> list[dict[str, Any]]:
        """Each row with its preview and badges: pruned parts, forgetting condensation,
        and the seq of the other half of each tool call/result pair."""
        digest = self.digests.get(s.id, s.head_seq)
        if digest is None:
            digest = self._small_digest(s, rows)
        out = []
        for stored in rows:
            links: list[tuple[str, int]] = []
            for p in getattr(stored.event, "parts", []) or []:
                if p.type == "tool_call" and p.id in digest.results:
                    links.append((f"result of {p.name}", digest.results[p.id]))
                elif p.type == "tool_result" and p.tool_call_id in digest.calls:
                    links.append((f"call {p.name or p.tool_call_id}", digest.calls[p.tool_call_id]))
            out.append(
                {
                    "e": stored,
                    "role": event_role(stored),
                    "preview": event_preview(stored),
                    "pruned": digest.pruned.get(stored.seq, []),
                    "condensed_by": digest.forgotten_by(stored.seq),
                    "links": links,
                }
            )
        return out

    def _small_digest(self, s: Session, rows: list[StoredEvent]) -> Digest:
        """Badges while the session's digest is still being read: the markers come from
        an indexed read of condensations and prunes, the tool links from the page."""
        d = Digest(s.id)
        for stored in self.store.read(s.id, kinds=["condensation", "prune"]):
            d.add(stored, sparse=True)
        for stored in rows:
            for p in getattr(stored.event, "parts", []) or []:
                if p.type == "tool_call":
                    d.calls.setdefault(p.id, stored.seq)
                elif p.type == "tool_result":
                    d.results.setdefault(p.tool_call_id, stored.seq)
        return d

    # -- one event

    def event_page(self, request: Request) -> Response:
        s = self.session(request.path_params["sid"])
        seq = _path_int(request, "seq")
        stored = self.event(s, seq)
        ctx = self._event_context(s, stored)
        name = "_event_body.html" if request.query_params.get("fragment") else "event.html"
        return self.page(request, name, s=s, **ctx)

    def _event_context(self, s: Session, stored: StoredEvent) -> dict[str, Any]:
        from eventstore import Condensation, LLMCall, Message, Prune, ViewOptions
        from eventstore.events import EVENT_ADAPTER

        evt = stored.event
        ctx: dict[str, Any] = {"e": stored, "role": event_role(stored), "fields": None}
        if isinstance(evt, Message):
            ctx["parts"] = evt.parts
        else:
            data = EVENT_ADAPTER.dump_python(evt, mode="json", exclude_none=True)
            for key in ("id", "created_at", "kind", "summary", "targets"):
                data.pop(key, None)
            ctx["fields"] = json.dumps(data, indent=2, ensure_ascii=False)
        if isinstance(evt, Condensation):
            forgotten = []
            for f in self.store.forgotten(s.id, stored.seq):
                forgotten.append((f.seq, f.kind, one_line(event_preview(f), 100)))
                if len(forgotten) >= 500:
                    break
            ctx |= {"condensation": evt, "forgotten": forgotten}
        elif isinstance(evt, Prune):
            targets = []
            for ref in evt.targets:
                try:
                    part = self.store.original(s.id, ref)
                    text = getattr(part, "output", None) or getattr(part, "text", "") or ""
                except Exception as exc:  # a target that no longer resolves is a finding
                    text = f"(cannot read the original: {exc})"
                targets.append((ref.seq, ref.index, text))
            ctx |= {"prune": evt, "targets": targets}
        elif isinstance(evt, LLMCall):
            try:
                view = self.store.view(
                    s.id, as_of=evt.view_seq, options=ViewOptions.recorded(evt.render_options)
                )
                ctx["rebuilt"] = view.fingerprint()
            except Exception as exc:
                ctx["rebuilt"] = f"(cannot rebuild: {exc})"
            ctx["call"] = evt
        return ctx

    # -- the view at a seq

    def view_page(self, request: Request) -> Response:
        s = self.session(request.path_params["sid"])
        at = _int_param(request, "at", s.head_seq, low=0)
        if at > s.head_seq or (at == 0 and s.head_seq > 0 and "at" in request.query_params):
            raise HTTPException(404, f"no seq {at} in session {s.id} (head is {s.head_seq})")
        view = self.store.view(s.id, as_of=at)
        messages = view.to_messages()
        digest = self.digests.get(s.id, s.head_seq)
        model = digest.model if digest is not None else None
        budget = self.budget(model)
        return self.page(
            request,
            "view.html",
            s=s,
            v=view,
            at=at,
            messages=[json.dumps(m, indent=2, ensure_ascii=False) for m in messages],
            fingerprint=view.fingerprint(),
            budget=budget,
            model=model,
            pinned=[i for i in view.items if i.pinned],
            tail=[i for i in view.items if not i.pinned],
            diff=self._diff(s, view, messages, digest),
        )

    def _diff(
        self, s: Session, view: View, messages: list[dict[str, Any]], digest: Digest | None
    ) -> dict[str, Any] | None:
        from eventstore import LLMCall, ViewOptions

        if digest is not None:
            calls = [(c.seq, c.view_seq) for c in digest.llm_calls]
        else:  # one indexed probe instead of reading every call
            calls = []
            latest = self.store.latest_event(s.id, "llm_call", as_of=view.seq)
            if latest is not None and isinstance(latest.event, LLMCall):
                calls = [(latest.seq, latest.event.view_seq)]
        prev = next(((c, v) for c, v in reversed(calls) if c <= view.seq and v < view.seq), None)
        if prev is None:
            return None
        call = self.event(s, prev[0]).event
        assert isinstance(call, LLMCall)
        before = self.store.view(
            s.id, as_of=call.view_seq, options=ViewOptions.recorded(call.render_options)
        )
        old = [json.dumps(m, sort_keys=True) for m in before.to_messages()]
        new = [json.dumps(m, sort_keys=True) for m in messages]
        ops: list[tuple[str, int, list[str]]] = []
        for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(
            None, old, new, autojunk=False
        ).get_opcodes():
            if tag == "equal":
                ops.append(("same", i2 - i1, []))
                continue
            if i2 > i1:
                ops.append(("removed", i2 - i1, [_msg_line(json.loads(m)) for m in old[i1:i2]]))
            if j2 > j1:
                ops.append(("added", j2 - j1, [_msg_line(json.loads(m)) for m in new[j1:j2]]))
        return {
            "call_seq": prev[0],
            "view_seq": call.view_seq,
            "fingerprint": call.fingerprint,
            "tokens": before.tokens,
            "ops": ops,
        }

    # -- verify

    def verify_page(self, request: Request) -> Response:
        s = self.session(request.path_params["sid"])
        result = self._verify(s)
        return self.page(request, "verify.html", s=s, **result)

    def verify_result(self, request: Request) -> Response:
        s = self.session(request.path_params["sid"])
        return self.page(request, "_verify.html", s=s, **self._verify(s))

    def _verify(self, s: Session) -> dict[str, Any]:
        if s.head_seq <= self.inline_limit:
            return self._report_context(s, self.store.verify(s.id))
        with self._verify_lock:
            job = self._verify_jobs.get(s.id)
            if job is None or (job["head"] != s.head_seq and job["done"]):
                job = {
                    "head": s.head_seq,
                    "done": False,
                    "report": None,
                    "error": None,
                    "started": time.monotonic(),
                }
                self._verify_jobs[s.id] = job
                threading.Thread(
                    target=self._verify_in_background, args=(s.id, job), daemon=True
                ).start()
        if not job["done"]:
            return {
                "pending": True,
                "elapsed": time.monotonic() - job["started"],
                "target": job["head"],
            }
        if job["error"]:
            return {"pending": False, "report": None, "error": job["error"]}
        return self._report_context(s, job["report"])

    def _verify_in_background(self, sid: str, job: dict[str, Any]) -> None:
        try:
            job["report"] = self.store.verify(sid)
        except Exception as exc:
            job["error"] = f"{type(exc).__name__}: {exc}"
        job["done"] = True

    def _report_context(self, s: Session, report: VerifyReport) -> dict[str, Any]:
        fields = {k: v for k, v in report.model_dump(mode="json").items() if k != "problems"}
        head_hash = fields.get("head_hash")
        if head_hash is None and s.head_seq:
            head_hash = self.event(s, s.head_seq).hash
        findings = [(_finding_kind(p), p) for p in report.problems]
        return {
            "pending": False,
            "report": report,
            "fields": fields,
            "findings": findings,
            "head_hash": head_hash,
            "error": None,
        }

    # -- export

    def export(self, request: Request) -> Response:
        s = self.session(request.path_params["sid"])
        return StreamingResponse(
            _export_chunks(self.store, s.id),
            media_type="application/x-ndjson",
            headers={"Content-Disposition": f'attachment; filename="{s.id}.jsonl"'},
        )


def _export_chunks(store: EventStore, sid: str) -> Iterator[bytes]:
    """``export_jsonl`` written by a producer thread, streamed a chunk at a time."""
    from eventstore.importers import export_jsonl

    chunks: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=64)

    class _Writer:
        def __init__(self) -> None:
            self.buf: list[str] = []
            self.size = 0

        def write(self, text: str) -> int:
            self.buf.append(text)
            self.size += len(text)
            if self.size >= 64 * 1024:
                self.flush()
            return len(text)

        def flush(self) -> None:
            if self.buf:
                chunks.put("".join(self.buf).encode("utf-8"))
                self.buf, self.size = [], 0

    def produce() -> None:
        writer = _Writer()
        try:
            export_jsonl(store, sid, writer)  # type: ignore[arg-type]
            writer.flush()
            chunks.put(None)
        except BaseException as exc:
            chunks.put(exc)

    threading.Thread(target=produce, daemon=True).start()
    while True:
        item = chunks.get()
        if item is None:
            return
        if isinstance(item, BaseException):
            raise item
        yield item


def _msg_line(m: dict[str, Any]) -> str:
    content = m.get("content")
    if isinstance(content, list):
        content = " ".join(str(c.get("text", "")) for c in content if isinstance(c, dict))
    bits = [one_line(str(content or ""), 120)]
    for c in m.get("tool_calls") or []:
        bits.append(f"-> {c.get('function', {}).get('name')}")
    return f"{m.get('role')}: {' '.join(b for b in bits if b)}"


def _finding_kind(problem: str) -> str:
    low = problem.lower()
    if "gap" in low or "head_seq" in low:
        return "gap"
    if "hash" in low:
        return "hash chain"
    if "renders to" in low or "fingerprint" in low or "rebuild" in low:
        return "fingerprint"
    return "other"


def _haystack(s: Session) -> str:
    return " ".join(x or "" for x in (s.id, s.title, s.user_id, s.tenant, s.parent_id)).lower()


def _fork_tree(sessions: list[Session]) -> list[tuple[Session, int]]:
    """Sessions in display order with their depth: each fork under its parent (when the
    parent is on the page), oldest first among siblings."""
    ids = {s.id for s in sessions}
    children: dict[str | None, list[Session]] = {}
    for s in sessions:
        parent = s.parent_id if s.parent_id in ids else None
        children.setdefault(parent, []).append(s)
    out: list[tuple[Session, int]] = []

    def walk(parent: str | None, depth: int) -> None:
        kids = children.get(parent, [])
        if parent is not None:
            kids = sorted(kids, key=lambda k: k.created_at)
        for kid in kids:
            out.append((kid, depth))
            walk(kid.id, depth + 1)

    walk(None, 0)
    return out


def _int_param(request: Request, name: str, default: int, *, low: int) -> int:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise HTTPException(400, f"{name} must be a whole number, got {raw!r}") from None
    if value < low or value > 2**31:
        raise HTTPException(
            404 if name in ("at", "after") else 400, f"{name}={value} is out of range"
        )
    return value


def _path_int(request: Request, name: str) -> int:
    raw = request.path_params[name]
    try:
        return int(raw)
    except ValueError:
        raise HTTPException(404, f"no event at seq {raw!r}") from None


def create_app(store: EventStore, *, inline_limit: int = INLINE_LIMIT) -> Starlette:
    """The viewer application for ``store`` (which it only reads)."""
    viewer = Viewer(store, inline_limit=inline_limit)

    async def not_found(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        detail = getattr(exc, "detail", "not found")
        return viewer.page(request, "error.html", status=status, status_code=status, detail=detail)

    async def library_error(request: Request, exc: Exception) -> Response:
        from eventstore import NotFoundError

        status = 404 if isinstance(exc, NotFoundError) else 400
        return viewer.page(
            request, "error.html", status=status, status_code=status, detail=str(exc)
        )

    from eventstore import EventStoreError

    routes = [
        Route("/", viewer.index),
        Route("/sessions/{sid}", viewer.timeline),
        Route("/sessions/{sid}/row", viewer.session_row),
        Route("/sessions/{sid}/chart", viewer.chart),
        Route("/sessions/{sid}/events", viewer.events),
        Route("/sessions/{sid}/events/{seq}", viewer.event_page),
        Route("/sessions/{sid}/view", viewer.view_page),
        Route("/sessions/{sid}/verify", viewer.verify_page),
        Route("/sessions/{sid}/verify/result", viewer.verify_result),
        Route("/sessions/{sid}/export.jsonl", viewer.export),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(
        routes=routes,
        exception_handlers={HTTPException: not_found, EventStoreError: library_error},
    )
    app.add_middleware(_GetOnly)
    app.state.viewer = viewer
    return app
