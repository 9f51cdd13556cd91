"""Cutting what is too large for one summarizer request, without losing or corrupting it.

Used by the compactor when a chunk's request would not fit the summarizer's own context
window: tool outputs are middle-truncated with a loud marker (the store keeps them whole),
an indivisible round is flattened into text pieces and cut at line boundaries into parts,
and ``data:`` image URIs are lifted out of text first so no cut ever falls inside an image.
"""

from __future__ import annotations

from collections.abc import Sequence

from .blocks import DATA_URI_RE, Block, Message, canonical_json
from .errors import ImageError
from .imageinfo import canonical_base64, info_from_data_uri
from .tokens.counting import count_text

__all__ = ["flatten", "split_texts", "tool_output_text", "truncate_text", "truncate_tool_result", "lift_data_uris"]


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
    """Cut text pieces longer than ``limit`` tokens at line (or character) boundaries."""
    out: list[Block] = []
    for piece in pieces:
        if piece["type"] != "text":
            out.append(piece)
            continue
        out.extend({"type": "text", "text": t} for t in _cut(piece["text"], limit, encoding))
    return out


def _cut(text: str, limit: int, encoding: str) -> list[str]:
    tokens = count_text(text, encoding)
    if tokens <= limit:
        return [text]
    parts = max(2, -(-tokens // limit))
    size = max(1, len(text) // parts)
    cut = text.rfind("\n", size // 2, size + size // 4)
    cut = cut + 1 if cut > 0 else size
    return _cut(text[:cut], limit, encoding) + _cut(text[cut:], limit, encoding)


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
    """Turn ``data:image/...;base64,`` URIs inside text pieces into image blocks.

    Cutting text into parts must never cut through an image's base64; as blocks they are
    priced and gated as the images they are.
    """
    out: list[Block] = []
    for piece in pieces:
        text = piece.get("text", "") if piece.get("type") == "text" else ""
        if ";base64," not in text:
            out.append(piece)
            continue
        last = 0
        for match in DATA_URI_RE.finditer(text):
            if not _readable_data_uri(match.group(0)):
                continue  # left in the text; the gate replaces it by a placeholder
            if text[last : match.start()]:
                out.append({"type": "text", "text": text[last : match.start()]})
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
            last = match.end()
        if text[last:]:
            out.append({"type": "text", "text": text[last:]})
    return out


def _readable_data_uri(uri: str) -> bool:
    try:
        return info_from_data_uri(uri).has_size
    except ImageError:
        return False
