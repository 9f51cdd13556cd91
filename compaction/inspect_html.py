"""Render an :class:`~compaction.inspect.Inspection` as one self-contained HTML page.

The page needs nothing but itself: inline CSS, no script, no external asset, no network.
Every text that comes from the store (messages, summaries, provenance, reasons) is hostile:
it is escaped with :func:`escape` (HTML metacharacters, quotes, control characters, lone
surrogates) and was already cut to a bounded length by :mod:`compaction.inspect`.  Hover
text is carried by ``title`` attributes, escaped the same way.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from typing import Any

from .inspect import Inspection, MessageRow

__all__ = ["escape", "render_html", "TIMELINE_CELLS"]

#: Above this many messages the timeline shows runs of messages (one cell per run of the
#: same state and summary) instead of one cell per message.
TIMELINE_CELLS = 5000

# C0 and C1 controls other than tab and newline, and lone surrogates (no UTF-8 form).
_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\ud800-\udfff]")

_PART_CLASS = {
    "request framing": "p-framing",
    "system": "p-system",
    "tools": "p-tools",
    "ask ledger": "p-ledger",
    "summary framing": "p-sframing",
    "masked window": "p-masked",
    "raw window": "p-raw",
    "images": "p-images",
    "pairing repairs": "p-repairs",
}

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,sans-serif;margin:1.5em auto;max-width:1200px;color:#1d1d1f;padding:0 1em}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse}td,th{padding:.2em .6em;border-bottom:1px solid #eee;text-align:left;vertical-align:top}
td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f6f8;padding:.6em;border-radius:4px;max-height:30em;overflow:auto}
.bar{display:flex;height:28px;border:1px solid #999;border-radius:3px;overflow:hidden;margin:.5em 0}
.bar>div{height:100%;min-width:1px}
.lane{position:relative;height:22px;margin:2px 0;background:#fafafa}
.lane>div{position:absolute;top:0;height:100%;box-sizing:border-box;border-right:1px solid #fff;overflow:hidden;font-size:11px;white-space:nowrap;color:#fff;padding-left:2px}
.lanes{display:grid;grid-template-columns:8em 1fr;align-items:center;column-gap:.5em}
.swatch{display:inline-block;width:.9em;height:.9em;border-radius:2px;vertical-align:middle;margin-right:.3em}
.p-framing{background:#8e8e93}.p-system{background:#5856d6}.p-tools{background:#af52de}
.p-ledger{background:#ff9500}.p-sframing{background:#c7a17a}.p-masked{background:#ffcc00}
.p-raw{background:#34c759}.p-images{background:#ff2d55}.p-repairs{background:#000}
.l1{background:#007aff}.l2{background:#0a4fa8}.l3{background:#06306a}.lx{background:#021a3b}
.s-raw{background:#34c759}.s-masked{background:#ffcc00}.s-summarized{background:#9bbcf0}.s-pinned{background:#5856d6}
.muted{color:#666}.warn{color:#b00020;font-weight:600}
"""


def escape(text: Any) -> str:
    """Return ``text`` safe inside HTML text and quoted attributes.

    ``&``, ``<``, ``>``, ``"`` and ``'`` become entities; control characters other than tab
    and newline, and lone surrogates, become U+FFFD (a CR of a CRLF is dropped), so a
    hostile text can neither close an element nor break the page's encoding.
    """
    value = str(text).replace("\r\n", "\n")
    return html.escape(_UNSAFE.sub("\ufffd", value), quote=True)


def _level_class(level: int) -> str:
    return f"l{level}" if level <= 3 else "lx"


def _part_class(name: str, level: int | None) -> str:
    return _level_class(level) if level is not None else _PART_CLASS.get(name, "p-framing")


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.3f}%" if whole else "0%"


def _composition(data: Inspection) -> list[str]:
    total = sum(p.tokens for p in data.composition)
    out = ['<h2 id="composition">Token composition</h2>', '<div class="bar" id="composition-bar">']
    for part in data.composition:
        if part.tokens <= 0:
            continue
        title = f"{part.name}: {part.tokens:,} tokens ({_pct(part.tokens, total)})"
        out.append(
            f'<div class="{_part_class(part.name, part.level)}" style="width:{_pct(part.tokens, total)}" '
            f'title="{escape(title)}" data-part="{escape(part.name)}" data-tokens="{part.tokens}"></div>'
        )
    out.append("</div>")
    out.append('<table id="composition-table"><tr><th>part</th><th class="n">tokens</th><th class="n">share</th></tr>')
    for part in data.composition:
        swatch = f'<span class="swatch {_part_class(part.name, part.level)}"></span>'
        out.append(
            f'<tr class="part" data-tokens="{part.tokens}"><td>{swatch}{escape(part.name)}</td>'
            f'<td class="n">{part.tokens:,}</td><td class="n">{_pct(part.tokens, total)}</td></tr>'
        )
    out.append(
        f'<tr id="composition-total"><th>total</th><th class="n" data-tokens="{total}">{total:,}</th>'
        f'<th class="n">{_pct(total, data.tokens)}</th></tr></table>'
    )
    verdict = "equal to" if total == data.tokens else "NOT equal to"
    css = "muted" if total == data.tokens else "warn"
    out.append(
        f'<p class="{css}" id="composition-check">The parts add up to {total:,} tokens, {verdict} the request\'s '
        f"{data.tokens:,} tokens (the wire gate's count).</p>"
    )
    return out


def _message_title(row: MessageRow) -> str:
    title = f"message {row.seq} · {row.role} · {row.state} · {row.stored_tokens:,} tokens stored"
    if row.shown_tokens is not None:
        title += f" · {row.shown_tokens:,} tokens in the request"
        if row.image_tokens:
            title += f" ({row.image_tokens:,} of them images)"
    if row.images:
        title += f" · {row.images} image(s)"
    if row.summary_id is not None:
        title += f" · in summary #{row.summary_id}"
    return title


def _runs(rows: Iterable[MessageRow]) -> list[list[MessageRow]]:
    runs: list[list[MessageRow]] = []
    for row in rows:
        if runs and runs[-1][-1].state == row.state and runs[-1][-1].summary_id == row.summary_id and (
            row.state == "summarized" or row.state == "pinned"
        ):
            runs[-1].append(row)
        else:
            runs.append([row])
    return runs


def _timeline(data: Inspection) -> list[str]:
    n = max(1, data.total_messages)
    out = [
        '<h2 id="timeline">Timeline of the store</h2>',
        f'<p class="muted">{data.total_messages:,} messages, oldest left. Hover a cell for its tokens. '
        '<span class="swatch s-summarized"></span>summarized <span class="swatch s-masked"></span>masked '
        '<span class="swatch s-raw"></span>raw <span class="swatch s-pinned"></span>pinned (system text)</p>',
        '<div class="lanes">',
    ]
    for level in sorted({s.level for s in data.summaries}, reverse=True):
        out.append(f"<div>shown L{level}</div><div class=\"lane\">")
        for s in data.summaries:
            if s.level != level:
                continue
            title = (
                f"summary #{s.id} · L{s.level} · messages {s.start_seq}–{s.end_seq - 1} · "
                f"{s.tokens:,} tokens in the request for {s.covered_tokens:,} stored"
            )
            left, width = _pct(s.start_seq, n), _pct(s.end_seq - s.start_seq, n)
            out.append(
                f'<div class="{_level_class(s.level)}" style="left:{left};width:{width}" title="{escape(title)}">'
                f'<a href="#summary-{s.id}" style="color:#fff">#{s.id}</a></div>'
            )
        out.append("</div>")
    out.append('<div>messages</div><div class="lane" id="message-lane">')
    rows = data.messages
    if len(rows) <= TIMELINE_CELLS:
        groups = [[row] for row in rows]
    else:
        groups = _runs(rows)
    for group in groups:
        first, last = group[0], group[-1]
        if len(group) == 1:
            title = _message_title(first)
        else:
            stored = sum(r.stored_tokens for r in group)
            title = f"messages {first.seq}–{last.seq} · {first.state} · {stored:,} tokens stored"
        left, width = _pct(first.seq, n), _pct(last.seq - first.seq + 1, n)
        out.append(
            f'<div class="s-{first.state}" style="left:{left};width:{width}" title="{escape(title)}" '
            f'data-seq="{first.seq}"></div>'
        )
    out.append("</div></div>")
    return out


def _summaries(data: Inspection) -> list[str]:
    out = [f'<h2 id="summaries">Shown summaries ({len(data.summaries)})</h2>']
    if not data.summaries:
        out.append('<p class="muted">None: the whole history is in the live window.</p>')
    stored = ", ".join(f"L{k}: {v}" for k, v in sorted(data.stored_summaries.items())) or "none"
    out.append(f'<p class="muted">Summaries in the store: {escape(stored)}.</p>')
    for s in data.summaries:
        cut = f" (text of {s.chars:,} characters)" if s.chars > len(s.text) else ""
        out.append(
            f'<section class="summary" id="summary-{s.id}" data-summary-id="{s.id}" data-level="{s.level}">'
            f"<h3>Summary #{s.id} · L{s.level} · messages {s.start_seq}–{s.end_seq - 1}</h3>"
            f'<p class="muted">{s.tokens:,} tokens in the request, standing for {s.covered_tokens:,} stored tokens '
            f"of {s.end_seq - s.start_seq:,} messages{escape(cut)}.</p>"
        )
        if s.provenance:
            out.append("<table class=\"provenance\">")
            for key, value in sorted(s.provenance.items()):
                out.append(f"<tr><th>{escape(key)}</th><td>{escape(value)}</td></tr>")
            out.append("</table>")
        out.append(f'<pre class="summary-text">{escape(s.text)}</pre></section>')
    return out


def _prefill(data: Inspection) -> list[str]:
    """Say when the request ends on an assistant turn, and why compile refuses it if it does."""
    if not data.ends_on_assistant_turn:
        return []
    if data.prefill_refused is None:
        return [
            '<p class="muted" id="prefill">The request ends on an assistant turn (a prefill of the answer).</p>'
        ]
    return [
        f'<p class="warn" id="prefill">The request ends on an assistant turn and compaction compile refuses it: '
        f"{escape(data.prefill_refused)}.</p>"
    ]


def _ledger(data: Inspection) -> list[str]:
    out = ['<h2 id="ledger">Ask ledger</h2>']
    if data.ledger is None:
        out.append('<p class="muted">No ask ledger in this request.</p>')
    else:
        out.append(f'<p class="muted">{data.ledger_tokens:,} tokens, ahead of the summaries.</p>')
        out.append(f'<pre id="ledger-text">{escape(data.ledger)}</pre>')
    return out


def _placeholders(data: Inspection) -> list[str]:
    out = [f'<h2 id="placeholders">Placeholders ({len(data.placeholders)})</h2>']
    if not data.placeholders:
        out.append('<p class="muted">The gate replaced nothing.</p>')
    else:
        out.append(
            '<table id="placeholder-table"><tr><th>kind</th><th>message</th><th>reason</th><th>facts</th></tr>'
        )
        for p in data.placeholders:
            where = f"seq {p.seq}" if p.seq is not None else "summary message"
            facts = " · ".join(
                str(x)
                for x in (
                    p.media_type,
                    f"{p.width}x{p.height} px" if p.width and p.height else None,
                    f"{p.byte_size:,} bytes" if p.byte_size is not None else None,
                    p.short_hash,
                )
                if x
            )
            out.append(
                f'<tr class="placeholder"><td>{escape(p.kind)}</td><td>{escape(where)}</td>'
                f"<td>{escape(p.reason)}</td><td>{escape(facts)}</td></tr>"
            )
        out.append("</table>")
    if data.masked_outputs:
        total = sum(data.masked_outputs.values())
        seqs = ", ".join(str(s) for s in sorted(data.masked_outputs))
        out.append(
            f'<p id="masked-outputs">{total:,} old tool outputs masked (loud placeholders, calls kept) in '
            f"messages {escape(seqs)}.</p>"
        )
    return out


def _live(data: Inspection) -> list[str]:
    live = [r for r in data.messages if r.state in ("raw", "masked")]
    out = [f'<h2 id="live">Live window ({len(live):,} messages from seq {data.live_start})</h2>']
    for row in live:
        out.append(
            f'<details class="message" data-seq="{row.seq}"><summary title="{escape(_message_title(row))}">'
            f"#{row.seq} {escape(row.role)} · {escape(row.state)} · {row.shown_tokens or 0:,} tokens</summary>"
            f"<pre>{escape(row.preview)}</pre></details>"
        )
    return out


def render_html(data: Inspection) -> str:
    """Return the inspection as one self-contained HTML page (no script, no external asset).

    Args:
        data: what :func:`compaction.inspect.inspect_store` returned.

    Returns:
        The page, a ``str`` to write as UTF-8.
    """
    head = (
        f"{data.tokens:,} of {data.budget:,} tokens · {data.format} · {data.model} · {data.encoding} · "
        f"{data.total_messages:,} messages, live window from seq {data.live_start} · "
        f"{len(data.summaries)} summaries shown · {data.images_shown} images shown, "
        f"{sum(p.kind == 'image' for p in data.placeholders)} replaced"
    )
    body = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; style-src \'unsafe-inline\'">',
        f"<title>compaction inspect: {escape(data.store)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Compiled context of {escape(data.store)}</h1>",
        f'<p id="summary-line">{escape(head)}</p>',
        *_prefill(data),
        *_composition(data),
        *_timeline(data),
        *_ledger(data),
        *_summaries(data),
        *_placeholders(data),
        *_live(data),
        "</body></html>",
    ]
    return "\n".join(body)
