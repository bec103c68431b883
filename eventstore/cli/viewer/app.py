"""The audit viewer: a read-only Starlette application over one :class:`EventStore`.

Routes (GET only; any other method answers 405, unknown sessions and seqs a 404 page).
Every request must name an allowed host in ``Host`` (and in ``Origin`` when it has one):
the host the viewer is bound to, its loopback names and ``allowed_hosts``; anything else
answers 421, so a web page whose name was rebound to the viewer's address (DNS
rebinding) cannot read it. Every response carries ``X-Content-Type-Options: nosniff``,
``X-Frame-Options: DENY`` and a same-origin ``Content-Security-Policy``.

``/``
    Sessions of the tenant with a text filter and their forks nested under them; each row's
    token and condensation counts are loaded with htmx.
``/sessions/{id}``
    The token chart and the timeline, a page of events at a time (``?after=SEQ``,
    ``?kind=K``); each row expands to the full event with htmx.
``/sessions/{id}/view?at=N``
    The view at seq N, its messages laid out to read (each with its exact JSON), tokens
    against the budget, its fingerprint (the string ``eventstore view ID --at N --json``
    prints) and a diff against the view sent at the previous llm call.
``/sessions/{id}/events/{seq}``
    One event in full; a condensation lists what it forgot, a prune each original part.
``/sessions/{id}/verify``
    :meth:`EventStore.verify` (in a background thread for big sessions) and its findings.
``/sessions/{id}/export.jsonl``
    :func:`eventstore.importers.export_jsonl`, byte for byte as ``eventstore export``,
    produced a chunk at a time as the client reads it (a cancelled download stops it);
    ``HEAD`` answers the headers without reading the log.
"""

from __future__ import annotations

import difflib
import json
import threading
import time
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
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
from starlette.types import Message as ASGIMessage

from eventstore.events import EventKind

from ..render import event_preview, event_role, one_line, time_str
from .charts import token_chart
from .digest import INLINE_LIMIT, Digest, Digests
from .messages import link_events, part_blocks, show_messages

if TYPE_CHECKING:
    from eventstore import EventStore, Session, StoredEvent, VerifyReport, View

HERE = Path(__file__).resolve().parent
PAGE_SIZE = 100
SESSIONS_PAGE = 100
#: The index counts matching sessions up to this many (then says "more than").
COUNT_CAP = 1_000
#: A filtered index page tests at most this many sessions (the next page goes on).
SCAN_WINDOW = 5_000
#: Every event kind, for the log's filter (the union's discriminators, in declaration order).
KINDS: list[str] = list(get_args(EventKind))


#: Names of the loopback interface, always allowed in ``Host``.
LOOPBACK = ("localhost", "127.0.0.1", "::1")
#: Headers on every response: no MIME sniffing, no framing, nothing loaded from elsewhere.
SECURITY_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
        "form-action 'self'; frame-ancestors 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Resource-Policy": "same-origin",
}


def host_name(value: str) -> str:
    """The host of a ``Host`` header or URL authority, without port, brackets or the
    trailing dot, lower-cased (``[::1]:8765`` -> ``::1``)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value.rstrip(".")


class _Guard:
    """Every request, on every path: GET and HEAD only (the viewer never writes), an
    allowed ``Host`` and ``Origin`` (DNS rebinding), and the security headers."""

    def __init__(self, app: ASGIApp, allowed_hosts: Iterable[str] | None) -> None:
        self.app = app
        hosts = list(LOOPBACK if allowed_hosts is None else allowed_hosts)
        self.any_host = "*" in hosts
        self.hosts = {host_name(h) for h in hosts if h != "*"}

    def allowed(self, scope: Scope) -> str | None:
        """Why the request is refused, or ``None``."""
        if self.any_host:
            return None
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        host = headers.get("host")
        if host is None or host_name(host) not in self.hosts:
            return f"host {host!r} is not one this viewer serves"
        origin = headers.get("origin")
        if origin is not None:
            scheme, sep, authority = origin.partition("://")
            if not sep or scheme not in ("http", "https") or host_name(authority) not in self.hosts:
                return f"origin {origin!r} is not one this viewer serves"
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: ASGIMessage) -> None:
            if message["type"] == "http.response.start":
                have = {k.lower() for k, _ in message.get("headers", [])}
                extra = [
                    (k.lower().encode("latin-1"), v.encode("latin-1"))
                    for k, v in SECURITY_HEADERS.items()
                    if k.lower().encode("latin-1") not in have
                ]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        refused = self.allowed(scope)
        if refused is not None:
            response: Response = PlainTextResponse(
                f"421 Misdirected Request: {refused}; start the viewer with "
                "--allow-host NAME to serve it under another name",
                status_code=421,
            )
            await response(scope, receive, send_with_headers)
            return
        if scope["method"] not in ("GET", "HEAD"):
            response = PlainTextResponse(
                "405 Method Not Allowed: the audit viewer is read-only",
                status_code=405,
                headers={"Allow": "GET, HEAD"},
            )
            await response(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)


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
        after = request.query_params.get("after") or None
        found = sessions_page(self.store, q, after, SESSIONS_PAGE)
        return self.page(
            request,
            "index.html",
            rows=_fork_tree(found.sessions),
            q=q,
            page=page,
            total=found.total,
            total_capped=found.total > COUNT_CAP,
            searched=found.searched,
            more=found.next_after is not None,
            next_after=found.next_after,
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
            ctx["blocks"] = part_blocks(evt.parts)
            digest = self.digests.get(s.id, s.head_seq)
            if digest is not None:  # while the log is still being read, no pair links
                link_events(ctx["blocks"], digest.calls, digest.results, s.id)
            stored_json = EVENT_ADAPTER.dump_python(evt, mode="json", exclude_none=True)
            ctx["stored_json"] = json.dumps(stored_json, indent=2, ensure_ascii=False)
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
            messages=show_messages(messages),
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
        headers = {"Content-Disposition": f'attachment; filename="{s.id}.jsonl"'}
        if request.method == "HEAD":  # the headers only: nothing of the log is read
            return Response(media_type="application/x-ndjson", headers=headers)
        return StreamingResponse(
            _export_chunks(self.store, s.id), media_type="application/x-ndjson", headers=headers
        )


async def _export_chunks(store: EventStore, sid: str) -> AsyncIterator[bytes]:
    """``export_jsonl``'s lines in chunks of about 64 KiB, each made in a worker thread
    only when the client asked for it: an aborted download leaves no thread behind, and
    the generator is closed (its read of the log with it) however the response ends."""
    from starlette.concurrency import run_in_threadpool

    from eventstore.importers import export_lines

    lines = export_lines(store, sid)

    def chunk() -> bytes | None:
        buf: list[str] = []
        size = 0
        for line in lines:
            buf.append(line)
            size += len(line)
            if size >= 64 * 1024:
                break
        return "".join(buf).encode("utf-8") if buf else None

    try:
        while (data := await run_in_threadpool(chunk)) is not None:
            yield data
    finally:
        lines.close()


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


@dataclass(frozen=True)
class SessionsPage:
    """One page of the index.

    Attributes:
        sessions: The page's sessions, newest first.
        total: Matching sessions counted up to ``COUNT_CAP + 1``; with a filter, only
            among the sessions searched (``searched``).
        next_after: The session the next page starts after, or ``None`` on the last.
        searched: With a filter that stopped at ``SCAN_WINDOW`` sessions, how many it
            searched (older sessions are searched by the next page); else ``None``.
    """

    sessions: list[Session]
    total: int
    next_after: str | None
    searched: int | None = None


def sessions_page(store: EventStore, q: str, after: str | None, limit: int) -> SessionsPage:
    """One page of the tenant's live sessions, newest first, after the session ``after``
    (the last of the previous page), whose id, title, user or parent contains ``q``
    (case-insensitive).

    Each request reads a bounded number of rows, alike at a hundred sessions or a hundred
    thousand: a page is a seek into the ``(tenant, created_at)`` index from where the
    previous page ended; the count stops at ``COUNT_CAP + 1``; and a filter (a substring
    test no index answers) tests at most the ``SCAN_WINDOW`` sessions that follow the
    page's start, so a rare or absent match costs a window, not the whole tenant, and the
    next page searches the window after it.
    """
    from sqlalchemy import func, or_, select

    from eventstore._sql import session_from_row
    from eventstore.schema import sessions

    where = [sessions.c.tenant == store.tenant, sessions.c.deleted_at.is_(None)]
    order = (sessions.c.created_at.desc(), sessions.c.id.desc())
    with store.engine.connect() as conn:
        page_where = list(where)
        if after is not None:
            mark = conn.execute(
                select(sessions.c.created_at).where(
                    sessions.c.tenant == store.tenant, sessions.c.id == after
                )
            ).first()
            if mark is not None:
                # The range on created_at is what the index seeks to; the rest breaks ties.
                page_where += [
                    sessions.c.created_at <= mark.created_at,
                    or_(sessions.c.created_at < mark.created_at, sessions.c.id < after),
                ]
        if not q:
            rows = conn.execute(
                select(sessions).where(*page_where).order_by(*order).limit(limit + 1)
            ).all()
            if after is None and len(rows) <= limit:
                total = len(rows)  # the first page holds them all: no second pass to count
            else:
                # Ordered as the index is, so that the count walks this tenant's index
                # entries (a bare LIMIT lets Postgres scan the table past other tenants').
                capped = (
                    select(sessions.c.id)
                    .where(*where)
                    .order_by(sessions.c.created_at.desc())
                    .limit(COUNT_CAP + 1)
                    .subquery()
                )
                total = conn.execute(select(func.count()).select_from(capped)).scalar_one()
            found = [session_from_row(r) for r in rows[:limit]]
            more = len(rows) > limit
            return SessionsPage(found, int(total), found[-1].id if more else None)
        escaped = q.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
        pattern = f"%{escaped}%"
        window = select(sessions).where(*page_where).order_by(*order).limit(SCAN_WINDOW).subquery()
        cols = (window.c.id, window.c.title, window.c.user_id, window.c.parent_id)
        if store.dialect == "sqlite":  # SQLite's LIKE ignores case (ASCII) without lower()
            test = or_(*(col.like(pattern, escape="\\") for col in cols))
        else:
            test = or_(*(col.ilike(pattern, escape="\\") for col in cols))
        rows = conn.execute(
            select(window)
            .where(test)
            .order_by(window.c.created_at.desc(), window.c.id.desc())
            .limit(COUNT_CAP + 1)
        ).all()
        # The window's last session, when it is full: older ones are left to the next page.
        edge = conn.execute(
            select(sessions.c.id)
            .where(*page_where)
            .order_by(*order)
            .offset(SCAN_WINDOW - 1)
            .limit(1)
        ).first()
    found = [session_from_row(r) for r in rows[:limit]]
    if len(rows) > limit:
        return SessionsPage(found, len(rows), found[-1].id, SCAN_WINDOW if edge else None)
    if edge is not None:
        return SessionsPage(found, len(rows), str(edge.id), SCAN_WINDOW)
    return SessionsPage(found, len(rows), None)


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


def create_app(
    store: EventStore,
    *,
    inline_limit: int = INLINE_LIMIT,
    allowed_hosts: Iterable[str] | None = None,
) -> Starlette:
    """The viewer application for ``store`` (which it only reads).

    Args:
        store: The store whose tenant the viewer shows.
        inline_limit: Sessions up to this many events are digested and verified inline.
        allowed_hosts: The names requests may carry in ``Host`` and ``Origin`` (default:
            the loopback names); ``"*"`` allows any (only behind a proxy that checks).
    """
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
    app.add_middleware(_Guard, allowed_hosts=allowed_hosts)
    app.state.viewer = viewer
    return app
