"""Cutting what is too large for one summarizer request, without losing or corrupting it.

Used by the compactor when a chunk's request would not fit the summarizer's own context
window: tool outputs are middle-truncated with a loud marker (the store keeps them whole),
an indivisible round is flattened into text pieces and cut at line boundaries into parts,
and ``data:`` image URIs are lifted out of text first so no cut ever falls inside an image.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from .blocks import DATA_URI_RE, Block, Message, canonical_json
from .errors import ImageError
from .imageinfo import canonical_base64, info_from_data_uri
from .tokens.counting import count_text

__all__ = [
    "cut_text",
    "flatten",
    "split_texts",
    "tool_output_text",
    "truncate_text",
    "truncate_tool_result",
    "lift_data_uris",
]


def flatten(message: Message) -> list[Block]:
    """Render one message as text pieces (and its image blocks) for split-part requests."""
    out: list[Block] = []
    for block in message.content:
        kind = block.get("type")
        if kind == "text":
            out.append({"type": "text", "text": f"[{message.role}] {block['text']}"})
        elif kind == "tool_use":
            out.append(
                {
                    "type": "text",
                    "text": f"[{message.role} called tool {block['name']} (id {block['id']})] "
                    f"{canonical_json(block.get('input', {}))}",
                }
            )
        elif kind == "tool_result":
            content = block.get("content", "")
            status = "error" if block.get("is_error") else "result"
            if isinstance(content, str):
                out.append({"type": "text", "text": f"[tool {status} for {block['tool_use_id']}]\n{content}"})
            else:
                out.append({"type": "text", "text": f"[tool {status} for {block['tool_use_id']}]"})
                for inner in content:
                    if inner.get("type") == "text":
                        out.append({"type": "text", "text": inner["text"]})
                    elif inner.get("type") == "image":
                        out.append(inner)
        elif kind == "image":
            out.append(block)
        elif kind == "thinking":
            out.append({"type": "text", "text": f"[{message.role} thinking] {block.get('thinking', '')}"})
        elif kind == "redacted_thinking":
            continue
        else:
            out.append({"type": "text", "text": f"[{kind} block] {canonical_json(block)}"})
    return out


def split_texts(pieces: Sequence[Block], limit: int, encoding: str) -> list[Block]:
    """Cut text pieces longer than ``limit`` tokens into parts of at most ``limit`` tokens.

    Args:
        pieces: text pieces and image blocks, in order (images pass through).
        limit: the most tokens a text part may have (tokens).
        encoding: the tiktoken encoding the tokens are counted in.

    Returns:
        The pieces with each long text replaced by its parts, in order; the parts join back
        to the text.  See :func:`cut_text` for where a cut falls.
    """
    out: list[Block] = []
    for piece in pieces:
        if piece["type"] != "text":
            out.append(piece)
            continue
        out.extend({"type": "text", "text": t} for t in cut_text(piece["text"], limit, encoding))
    return out


#: A part is aimed this much under the limit (15/16), so that the first try usually fits.
_AIM = (15, 16)


def cut_text(text: str, limit: int, encoding: str) -> list[str]:
    """Return ``text`` cut into consecutive parts of at most ``limit`` tokens each.

    A text within ``limit`` stays whole.  Otherwise one pass from the start: each part is
    aimed a little under ``limit`` tokens by the density of the text before it, ends after
    the last line break in the second half of that window (at the window's end when that half
    has none), is counted exactly, and is aimed shorter in proportion when it is over.  A cut
    never falls inside a ``data:`` image URI; a URI over ``limit`` on its own is a part by
    itself (the gate prices it as the image or the placeholder it is).  A token covers at
    least one character and at most a few hundred, so each try counts at most a constant
    multiple of the part it yields: time and memory are linear in the length of ``text``
    (the remainder is never copied, only the parts are kept).

    Args:
        text: the text to cut.
        limit: the most tokens a part may have (tokens).
        encoding: the tiktoken encoding the tokens are counted in.

    Returns:
        The parts, in order; ``"".join(parts) == text``.  A single character over ``limit``
        tokens (possible only when ``limit`` is under 4) is a part by itself.

    Example:
        >>> [len(part) for part in cut_text("alpha beta gamma\\n" * 1000, 1000, "o200k_base")]
        [3978, 3978, 3978, 3978, 1088]
    """
    limit = max(1, limit)
    total = count_text(text, encoding)
    if total <= limit:
        return [text]
    starts, ends = _data_uri_spans(text)
    parts: list[str] = []
    start, size = 0, len(text)
    width = _aim(size, total, limit)
    while start < size:
        end, whole_uri = _cut_point(text, start, start + width, starts, ends)
        part = text[start:end]
        tokens = count_text(part, encoding)
        if tokens > limit and not whole_uri and end - start > 1:
            width = min(end - start - 1, _aim(end - start, tokens, limit))  # over: aim shorter
            continue
        parts.append(part)
        start = end
        width = min(2 * len(part), _aim(len(part), tokens, limit))  # never more than twice as long
    return parts


def _aim(length: int, tokens: int, limit: int) -> int:
    """Return the characters a part is aimed at: ``limit`` tokens at ``length / tokens``, less a margin."""
    return max(1, length * limit * _AIM[0] // (max(1, tokens) * _AIM[1]))


def _data_uri_spans(text: str) -> tuple[list[int], list[int]]:
    """Return the start and end offsets of the ``data:`` image URIs inside ``text``, in order."""
    if ";base64," not in text:
        return [], []
    spans = [(m.start(), m.end()) for m in DATA_URI_RE.finditer(text)]
    return [s for s, _ in spans], [e for _, e in spans]


def _cut_point(text: str, start: int, target: int, starts: list[int], ends: list[int]) -> tuple[int, bool]:
    """Return where the part from ``start`` aimed at ``target`` ends, and whether it is one whole URI.

    The cut falls after the last line break in the second half of ``[start, target)``, at
    ``target`` when there is none, and is moved out of any ``data:`` URI: to its start, or,
    when the URI begins the part, to its end.
    """
    size = len(text)
    if target >= size:
        end = size
    else:
        newline = text.rfind("\n", start + (target - start) // 2, target)
        end = newline + 1 if newline >= start else target
    index = bisect_right(starts, end) - 1
    if index >= 0 and starts[index] < end < ends[index]:
        if starts[index] > start:
            return starts[index], False
        return ends[index], True
    return end, False


def tool_output_text(block: Block) -> str:
    content = block.get("content", "")
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content if b.get("type") == "text")


def truncate_text(text: str, keep_tokens: int, encoding: str, what: str = "this tool output") -> str:
    """Return ``text`` cut in the middle to about ``keep_tokens`` tokens, with a loud marker.

    The head keeps three fifths, the tail two fifths; a cut never falls inside a ``data:``
    URI.  The marker names ``what`` was cut, how much, and that the store keeps it whole.
    """
    size = max(1, count_text(text, encoding))
    keep_chars = max(1, len(text) * keep_tokens // size)
    cut_head, cut_tail = keep_chars * 3 // 5, len(text) - keep_chars * 2 // 5
    if ";base64," in text:  # never cut through a data: URI (half an image is garbage)
        for match in DATA_URI_RE.finditer(text):
            if match.start() < cut_head < match.end():
                cut_head = match.start()
            if match.start() < cut_tail < match.end():
                cut_tail = match.end()
    head, tail = text[:cut_head], text[max(cut_head, cut_tail) :]
    omitted = len(text) - len(head) - len(tail)
    marker = (
        f"\n[… {omitted:,} characters of {what} ({text.count(chr(10)) + 1:,} lines in all) are left out "
        "of this summary request to fit the summarizer's context window; the store keeps it whole …]\n"
    )
    return head + marker + tail


def truncate_tool_result(block: Block, keep_tokens: int, encoding: str) -> Block:
    """Return ``block`` with its text cut in the middle to about ``keep_tokens``, marked loudly."""
    cut = truncate_text(tool_output_text(block), keep_tokens, encoding)
    content = block.get("content", "")
    if isinstance(content, str):
        return {**block, "content": cut}
    images = [b for b in content if b.get("type") != "text"]
    return {**block, "content": [{"type": "text", "text": cut}, *images]}


def lift_data_uris(pieces: Sequence[Block]) -> list[Block]:
    """Turn ``data:image/...;base64,`` URIs inside text pieces into pieces of their own.

    Cutting text into parts must never cut through an image's base64.  A URI holding a
    readable image becomes an image block, priced and gated as the image it is; one that
    does not (cut short, damaged) becomes a text piece holding just the URI, which the gate
    replaces by a placeholder: alone in its piece, it is priced as that placeholder
    (``Compactor`` plans a part by it), and no piece holds several of them, whose
    placeholders together could outgrow the part the piece was cut for.  The text around
    the URIs is kept, in order.
    """
    out: list[Block] = []
    for piece in pieces:
        text = piece.get("text", "") if piece.get("type") == "text" else ""
        if ";base64," not in text:
            out.append(piece)
            continue
        last = 0
        for match in DATA_URI_RE.finditer(text):
            if text[last : match.start()]:
                out.append({"type": "text", "text": text[last : match.start()]})
            last = match.end()
            if not _readable_data_uri(match.group(0)):
                out.append({"type": "text", "text": match.group(0)})  # the gate's placeholder stands for it
                continue
            media = f"image/{match.group(1).lower()}"
            out.append(
                {
                    "type": "image",
                    "source": {
                        "type": "base64",
                        "media_type": media,
                        "data": canonical_base64(match.group(2)),
                    },
                }
            )
        if text[last:]:
            out.append({"type": "text", "text": text[last:]})
    return out


def _readable_data_uri(uri: str) -> bool:
    try:
        return info_from_data_uri(uri).has_size
    except ImageError:
        return False
