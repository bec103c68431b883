"""The token chart as inline SVG, drawn on the server (no script, works offline).

Raw tokens (every stored message so far) and view tokens (what the model would see) per
seq: the view curve climbs and drops at each condensation, the sawtooth. Long sessions are
sampled into at most :data:`MAX_POINTS` buckets; each bucket keeps its lowest and highest
view value in seq order, so no drop or peak disappears. A marker at each condensation links
to its event; a tick under the axis marks each prune; dots are provider-reported prompt
tokens; a dashed line is the budget.
"""

from __future__ import annotations

from collections.abc import Sequence
from html import escape
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .digest import Digest, LLMCallPoint

MAX_POINTS = 600
MAX_MARKERS = 400
WIDTH, HEIGHT = 960, 260
LEFT, RIGHT, TOP, BOTTOM = 64, 12, 14, 34


def _sample(vals: Sequence[int], n: int, limit: int) -> list[tuple[int, int]]:
    """``(index, value)`` pairs: every point, or each bucket's min and max in order."""
    if n <= limit:
        return [(i, vals[i]) for i in range(n)]
    out: list[tuple[int, int]] = []
    buckets = limit // 2
    for b in range(buckets):
        lo = b * n // buckets
        hi = max(lo + 1, (b + 1) * n // buckets)
        chunk = vals[lo:hi]
        i_min = lo + min(range(len(chunk)), key=chunk.__getitem__)
        i_max = lo + max(range(len(chunk)), key=chunk.__getitem__)
        for i in sorted({i_min, i_max}):
            out.append((i, vals[i]))
    if out[-1][0] != n - 1:
        out.append((n - 1, vals[n - 1]))
    return out


def _thin(seqs: list[int], limit: int) -> list[int]:
    if len(seqs) <= limit:
        return seqs
    step = len(seqs) / limit
    return [seqs[int(k * step)] for k in range(limit)]


def token_chart(digest: Digest, session_id: str, budget: int | None) -> str:
    """The chart for one session, as an ``<svg>`` element."""
    n = digest.head
    if n == 0:
        return '<p class="muted">no events yet</p>'
    top = max(max(digest.raw), max(digest.view), budget or 0, 1)
    prompts = [c for c in digest.llm_calls if c.prompt_tokens is not None]
    if prompts:
        top = max(top, max(c.prompt_tokens or 0 for c in prompts))
    top = int(top * 1.05) + 1
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM

    def x(seq: int) -> float:
        return LEFT + (plot_w * (seq - 1) / max(n - 1, 1))

    def y(v: int) -> float:
        return TOP + plot_h - plot_h * v / top

    def path(points: list[tuple[int, int]]) -> str:
        return " ".join(f"{x(i + 1):.1f},{y(v):.1f}" for i, v in points)

    sid = escape(session_id, quote=True)
    out = [
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" width="100%" role="img" '
        f'xmlns="http://www.w3.org/2000/svg" aria-label="tokens per seq">',
        f'<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" class="plot"/>',
    ]
    for k in range(5):
        v = top * k // 4
        out.append(
            f'<line x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
            f'class="grid"/><text x="{LEFT - 6}" y="{y(v) + 4:.1f}" class="axis" '
            f'text-anchor="end">{_short(v)}</text>'
        )
    for k in range(6):
        seq = 1 + (n - 1) * k // 5
        out.append(
            f'<text x="{x(seq):.1f}" y="{HEIGHT - BOTTOM + 28}" class="axis" '
            f'text-anchor="middle">{seq}</text>'
        )
    out.append(
        f'<polyline class="raw" points="{path(_sample(digest.raw, n, MAX_POINTS))}">'
        "<title>raw tokens: every stored message</title></polyline>"
    )
    out.append(
        f'<polyline class="view" points="{path(_sample(digest.view, n, MAX_POINTS))}">'
        "<title>view tokens (from stored counts)</title></polyline>"
    )
    if budget:
        out.append(
            f'<line class="budget" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y(budget):.1f}" '
            f'y2="{y(budget):.1f}"><title>budget: {budget:,} tokens</title></line>'
        )
    for c in _thin_calls(prompts):
        out.append(
            f'<circle class="prompt" cx="{x(c.seq):.1f}" cy="{y(c.prompt_tokens or 0):.1f}" '
            f'r="1.8"><title>seq {c.seq}: {c.prompt_tokens:,} prompt tokens reported by '
            f"{escape(c.model)}</title></circle>"
        )
    base = TOP + plot_h
    for seq in _thin(digest.prunes, MAX_MARKERS):
        out.append(
            f'<a href="/sessions/{sid}/events/{seq}" class="prune-tick">'
            f'<line x1="{x(seq):.1f}" x2="{x(seq):.1f}" y1="{base}" y2="{base + 8}"/>'
            f"<title>prune at seq {seq}</title></a>"
        )
    for seq in _thin(digest.condensations, MAX_MARKERS):
        v = digest.view[seq - 1]
        out.append(
            f'<a href="/sessions/{sid}/events/{seq}" class="condensation-marker" '
            f'data-seq="{seq}"><circle cx="{x(seq):.1f}" cy="{y(v):.1f}" r="5"/>'
            f"<title>condensation at seq {seq}</title></a>"
        )
    out.append("</svg>")
    return "".join(out)


def _thin_calls(calls: list[LLMCallPoint]) -> list[LLMCallPoint]:
    if len(calls) <= MAX_POINTS:
        return calls
    step = len(calls) / MAX_POINTS
    return [calls[int(k * step)] for k in range(MAX_POINTS)]


def _short(v: int) -> str:
    if v >= 1_000_000:
        return f"{v / 1_000_000:.1f}M"
    if v >= 10_000:
        return f"{v // 1000}k"
    return f"{v:,}"
