"""Exact token counts of texts and of messages' non-image content.

Text is counted exactly with the offline tiktoken encoding (``encode_ordinary``: special
token text counts as ordinary text, as in a chat request).  Image blocks and ``data:``
image URIs inside text are *not* counted here: they are priced from their pixel size by
:mod:`compaction.tokens.image_pricing`, after the image policy decided whether each is shown.

Per-message framing follows OpenAI's cookbook recipe for chat requests ("How to count
tokens with tiktoken", https://cookbook.openai.com/examples/how_to_count_tokens_with_tiktoken):
3 tokens a message plus the role, 3 tokens to prime the reply.  Tool calls and tool
results carry their ids and names; we count them, with a small framing constant, so the
estimate errs on the safe side for both the OpenAI Chat and the Anthropic Messages shape.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

from ..blocks import DATA_URI_RE, Block, Message, canonical_json, unknown_block_text
from ..errors import EncodingDataMissing, InvalidArgument, found
from .encodings import DEFAULT_ENCODING, get_encoding
from .fast import count_tokens
from .hf import HF_PREFIX

__all__ = [
    "COUNTING_VERSION",
    "cache_key",
    "MESSAGE_OVERHEAD",
    "REQUEST_OVERHEAD",
    "TOOL_CALL_OVERHEAD",
    "message_overhead",
    "request_overhead",
    "count_text",
    "count_texts",
    "strip_data_uris",
    "block_text_tokens",
    "blocks_text_tokens",
    "results_only",
    "message_text_tokens",
    "BLOCK_SEPARATOR",
    "THINKING_FRAME",
    "UNSIGNED_THINKING",
    "REDACTED_THINKING",
    "DATA_URI_FRAMING",
    "TOOL_ERROR_PREFIX",
    "DROPPED_STAND_IN",
    "EMPTY_STAND_IN",
    "EMPTY_ERROR_RESULT",
    "blocks_were_all_dropped",
    "shipped_blocks",
]

#: Bumped whenever a message's count changes for the same text; stores key their cached
#: counts by it (see :func:`cache_key`), so counts made by older code are never reused.
#: 5: a tool call's arguments counted as the JSON text that ships, not escaped a second time.
#: 6: a tool call's frame 3 tokens (was 8); a message of tool results only counts no frame of
#: its own (each result is its own message on the OpenAI wire, framed by itself); no join is
#: counted beside a call or a result (only texts are joined).
#: 7: a call's id and frame count the larger of the two, not their sum (see TOOL_CALL_OVERHEAD).
#: 8: an unsigned thinking block counts the tokens of the text it ships as (UNSIGNED_THINKING).
#: 9: a block in a tool result other than text or an image counts as the JSON text it ships as.
#: 10: a message with nothing a provider takes (no blocks, or only empty or whitespace texts)
#: counts the stand-in it ships as (EMPTY_STAND_IN).
#: 11: a data: image URI in a block of unknown type counts the text stand-in it ships as
#: (blocks.data_uri_stand_in), not as an image's framing.
#: 12: an empty or whitespace text beside other blocks of its message is not shipped, not counted.
#: 13: an empty or whitespace text in a tool result is not shipped, not counted; a tool result
#: left with nothing ships without content, or as EMPTY_ERROR_RESULT when it is an error.
#: 14: a redacted_thinking block counts at least the tokens of the text it ships as in a final
#: assistant turn (REDACTED_THINKING), where Anthropic refuses it.
COUNTING_VERSION = 14


def cache_key(encoding: str, dropped: frozenset[str] = frozenset()) -> str:
    """Return the key under which a store caches counts made by this code in ``encoding``.

    Args:
        encoding: the encoding's name.
        dropped: the block types the counts leave out (a request format's
            ``dropped_block_types``, see :func:`blocks_text_tokens`); counts that leave out
            different types are different facts, so they get different keys.  The default
            key (nothing dropped) is the one stores have always used.  An ``hf:`` encoding is keyed
    by the sha256 of its ``tokenizer.json`` and its chat template
    (:func:`compaction.tokens.hf.content_key`), never by its path.

    Raises:
        TokenizerFileError: an ``hf:`` encoding whose file cannot be loaded.
    """
    if encoding.startswith(HF_PREFIX):
        from .hf import content_key

        encoding = content_key(encoding)
    if not dropped:
        return f"{encoding}@{COUNTING_VERSION}"
    return f"{encoding}@{COUNTING_VERSION}-{'+'.join(sorted(dropped))}"


#: Tokens of framing per message: 3 per the cookbook, plus 1 for the role.
MESSAGE_OVERHEAD = 4
#: Tokens that prime the reply (``<|start|>assistant<|message|>``).
REQUEST_OVERHEAD = 3


def message_overhead(encoding: str) -> int:
    """Return the framing tokens of one message in ``encoding`` (tokens).

    :data:`MESSAGE_OVERHEAD` for a tiktoken encoding; for an ``hf:`` encoding, its chat
    template's framing counted with its tokenizer (:mod:`compaction.tokens.chat_templates`).
    """
    if not encoding.startswith(HF_PREFIX):
        return MESSAGE_OVERHEAD
    from .hf import framing

    return framing(encoding)[0]


def request_overhead(encoding: str) -> int:
    """Return the framing tokens of one request beyond its messages' in ``encoding`` (tokens).

    :data:`REQUEST_OVERHEAD` (the reply primer) for a tiktoken encoding; for an ``hf:``
    encoding, its chat template's begin-of-text and reply primer.
    """
    if not encoding.startswith(HF_PREFIX):
        return REQUEST_OVERHEAD
    from .hf import framing

    return framing(encoding)[1]


#: The least a tool call's id and frame count together (tokens): a call counts
#: ``max(TOOL_CALL_OVERHEAD, tokens of its id)`` besides its name and arguments.  Two
#: references, and the count is never below either:
#:
#: * the body's count (the OpenAI cookbook's: every string of the call, its id included);
#: * the API-tested figure of hmarr/openai-chat-tokens, name and arguments plus a frame of 3
#:   (``messageTokensEstimate``: "if (message.function_call) tokens += 3",
#:   https://github.com/hmarr/openai-chat-tokens/blob/main/src/index.ts), with no id: the
#:   model never reads a call's id (OpenAI's harmony format renders a call as
#:   ``<|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>ARGS<|call|>``,
#:   https://cookbook.openai.com/articles/openai-harmony).
#:
#: A real id (``call_`` or ``toolu_`` and 24 random characters) is 10 tokens or more, so
#: the frame is inside it; a short id (``"1"``) is topped up to 3.  It was 8 added to the
#: id, a guess with no source, then 3 added to the id (COUNTING_VERSION 6).
TOOL_CALL_OVERHEAD = 3
#: Tokens a renderer may add where it joins two parts of one message into one string.
BLOCK_SEPARATOR = 1
#: Tokens of the frame around a signed thinking block (its type and fields beside the
#: thinking text and signature the body count reads).
THINKING_FRAME = 8
#: What an unsigned thinking block is sent as to Anthropic, before its text (Anthropic refuses
#: a thinking block whose signature is missing or not its own: "Invalid `signature` in
#: `thinking` block").  Counted as its own tokens, not a constant: 13 o200k tokens, more than
#: THINKING_FRAME, which COUNTING_VERSION 7 charged and so under-counted the body.
UNSIGNED_THINKING = "[earlier reasoning, not signed, sent as text] "
#: What a ``redacted_thinking`` block ships as in a request's final assistant turn, where
#: Anthropic refuses it when the request does not enable thinking (see
#: :mod:`compaction.outputs.anthropic_messages`).  Its ``data`` is the provider's ciphertext,
#: which no model reads as text, so the stand-in says what was there instead of carrying it.
#: A redacted_thinking block counts the larger of its data's tokens and this text's (a floor,
#: COUNTING_VERSION 14), so the stand-in never ships above the count of the block it replaces,
#: whichever message of the final turn holds it.
REDACTED_THINKING = "[redacted reasoning: encrypted by the provider, not sent in a final assistant turn]"
#: The prefix OpenAI Chat puts before an error tool result's text.
TOOL_ERROR_PREFIX = "[tool error] "


@lru_cache(maxsize=65536)
def _count_cached(text: str, encoding: str) -> int:
    return _count_fast(text, encoding)


def _count_fast(text: str, encoding: str) -> int:
    if encoding.startswith(HF_PREFIX):
        from .hf import count_hf

        return count_hf(text, encoding)
    try:
        return count_tokens(text, encoding)
    except EncodingDataMissing:
        get_encoding(encoding)  # an unknown name: raise the package's own error
        raise


def count_text(text: str, encoding: str = DEFAULT_ENCODING) -> int:
    """Return the exact number of tokens of ``text`` in ``encoding``.

    A text longer than :data:`SEGMENT_CHARS` characters is counted in segments cut where the
    pre-tokenizer always cuts (see :func:`_count_segments`), so the memory counting takes
    stays bounded however long the text is.

    Args:
        text: any string; special-token text is counted as ordinary text.
        encoding: ``"o200k_base"`` (default), ``"cl100k_base"``, or ``"hf:PATH"`` naming a
            Hugging Face ``tokenizer.json`` (see :mod:`compaction.tokens.hf`).

    Returns:
        The token count (tokens), equal to ``len(tiktoken_encoding.encode_ordinary(text))``;
        counted by the exact fast path (:mod:`compaction.tokens.fast`).  Under ``hf:``,
        ``len(tokenizer.encode(text, add_special_tokens=False).ids)``.

    Raises:
        InvalidArgument: ``text`` or ``encoding`` is not a string.
        EncodingDataMissing: unknown encoding or missing package data.
        TokenizerFileError: an ``hf:`` file that is missing or not a ``tokenizer.json``
            (an ``EncodingDataMissing``).
    """
    if not text:
        return 0
    if not isinstance(text, str) or not isinstance(encoding, str):
        raise InvalidArgument(
            f"count_text counts a str in a named encoding; found text {found(text)}, encoding {found(encoding)}"
        )
    if len(text) <= 4096:
        return _count_cached(text, encoding)
    if len(text) <= SEGMENT_CHARS or encoding.startswith(HF_PREFIX):
        return _count_fast(text, encoding)  # a local tokenizer's pre-tokenizer is its own
    return _count_segments(text, encoding)


#: Texts longer than this (characters) are counted a segment of about this length at a time.
SEGMENT_CHARS = 1 << 16

#: A line break followed by an ASCII letter: the pre-tokenizer of both encodings always ends
#: a piece right after it (see :func:`_count_segments`).
_PIECE_BOUNDARY = re.compile(r"\n(?=[A-Za-z])")


def _count_segments(text: str, encoding: str) -> int:
    """Return the tokens of a long ``text``, counted a segment at a time.

    Exact: tiktoken's pre-tokenizer (the ``pat_str`` of cl100k_base and o200k_base) cuts the
    text into pieces and BPE runs inside each piece, so a text's count is the sum of its
    pieces' counts.  Every alternative of both patterns that can match a line break ends with
    whitespace or line breaks (``\\s*[\\r\\n]+``, ``\\s+``, the ``[\\r\\n/]*`` tail of a
    punctuation run), and a letter run's optional first character is never a line break, so
    the piece holding a line break that is followed by an ASCII letter ends right after it;
    the patterns look ahead, never behind, so the pieces after it are those of the rest
    counted alone.  A segment therefore ends at the first such line break at least
    :data:`SEGMENT_CHARS` characters in; a text with none is counted whole.
    """
    total = 0
    start, size = 0, len(text)
    while start < size:
        end = size
        if size - start > SEGMENT_CHARS:
            boundary = _PIECE_BOUNDARY.search(text, start + SEGMENT_CHARS)
            if boundary is not None:
                end = boundary.end()
        total += _count_fast(text[start:end], encoding)
        start = end
    return total


def count_texts(texts: Iterable[str], encoding: str = DEFAULT_ENCODING) -> list[int]:
    """Return the exact token count of each text (tokens), in order."""
    return [count_text(t, encoding) for t in texts]


def strip_data_uris(text: str) -> str:
    """Return ``text`` with every ``data:image/...;base64,`` URI removed (they are priced as images)."""
    if ";base64," not in text:
        return text
    return DATA_URI_RE.sub("", text)


#: Tokens a ``data:`` image URI adds to its text whatever is decided for it: shown, it is
#: lifted out and the text splits around it (two joins); replaced, its placeholder is joined
#: into the text.  The image or placeholder itself is priced by :mod:`compaction.images`.
DATA_URI_FRAMING = 2 * BLOCK_SEPARATOR


def _string_tokens(text: str, encoding: str) -> int:
    if ";base64," not in text:
        return count_text(text, encoding)
    uris = len(DATA_URI_RE.findall(text))
    return count_text(DATA_URI_RE.sub("", text), encoding) + DATA_URI_FRAMING * uris


def _images_note_tokens(tool_use_id: str, encoding: str) -> int:
    """Tokens of the note OpenAI Chat puts before a tool result's images, with its join."""
    return BLOCK_SEPARATOR + count_text(f"[images returned by tool call {tool_use_id}]", encoding)


def block_text_tokens(block: Block, encoding: str = DEFAULT_ENCODING) -> int:
    """Return the tokens of one block's non-image content, with its framing (tokens).

    Images (top-level, nested in ``tool_result`` or as ``data:`` URIs) count 0 here.
    An unknown block type is priced as its canonical JSON, so it is never free.
    """
    frame = 0 if results_only((block,)) else message_overhead(encoding)
    return blocks_text_tokens((block,), encoding) - frame


def _own_tokens(block: Block, encoding: str) -> int:
    """Return the tokens of one block without the blocks a ``tool_result`` holds (tokens)."""
    kind = block.get("type")
    if kind == "text":
        return _string_tokens(block["text"], encoding)
    if kind == "image":
        return 0
    if kind == "tool_use":
        # What ships: the call's id, its name and its arguments as JSON text (OpenAI Chat's
        # ``arguments`` string is this text; Anthropic's ``input`` is this object), the id
        # topped up to TOOL_CALL_OVERHEAD for the frame.  Before, the arguments were counted
        # inside the JSON of the whole call, escaped a second time (every quote and line break
        # two characters): 2.5 times the tokens of the arguments of a real Korean session.
        return (
            max(TOOL_CALL_OVERHEAD, _string_tokens(str(block.get("id", "")), encoding))
            + _string_tokens(str(block.get("name", "")), encoding)
            + _string_tokens(canonical_json(block.get("input", {})), encoding)
        )
    if kind == "tool_result":
        content = block.get("content", "")
        tool_use_id = block.get("tool_use_id", "")
        tokens = message_overhead(encoding) + count_text(tool_use_id, encoding)
        if block.get("is_error"):
            tokens += count_text(TOOL_ERROR_PREFIX, encoding)  # OpenAI Chat marks the result so
        if isinstance(content, str):
            if ";base64," in content and DATA_URI_RE.search(content):
                tokens += _images_note_tokens(tool_use_id, encoding)  # a data URI shown is lifted out
            return tokens + _string_tokens(content, encoding)
        if any(inner.get("type") == "image" for inner in content) or any(
            inner.get("type") == "text" and ";base64," in inner.get("text", "") for inner in content
        ):
            # OpenAI Chat ships a tool result's images in a user message after a text note
            tokens += _images_note_tokens(tool_use_id, encoding)
        return tokens  # the blocks it holds are counted by the caller's walk
    if kind == "thinking":
        # the Anthropic body carries the signature too (opaque, like redacted_thinking's data);
        # an unsigned one ships as a text stand-in: UNSIGNED_THINKING then its text
        thinking = count_text(block.get("thinking", ""), encoding)
        if not block.get("signature"):
            return count_text(UNSIGNED_THINKING, encoding) + thinking
        return thinking + count_text(block.get("signature", ""), encoding) + THINKING_FRAME
    if kind == "redacted_thinking":
        # Opaque ciphertext: providers bill it, we cannot read it; count its characters as
        # text, and never below the stand-in it ships as in a final assistant turn.
        return max(count_text(str(block.get("data", "")), encoding), count_text(REDACTED_THINKING, encoding))
    # OpenAI Chat carries it as a text stand-in wrapping its JSON, never cheaper than the JSON
    return _string_tokens(unknown_block_text(block), encoding)


#: What a message whose every block the request format drops ships as: a provider refuses an
#: empty turn (Anthropic) or an assistant message with neither content nor calls (OpenAI).
DROPPED_STAND_IN: Block = {
    "type": "text",
    "text": "[reasoning this request format cannot carry was left out of this turn]",
}


def blocks_were_all_dropped(blocks: Iterable[Block], dropped: frozenset[str]) -> bool:
    """Return whether ``blocks`` holds blocks and every one is of a ``dropped`` type."""
    items = list(blocks)
    return bool(items) and all(b.get("type") in dropped for b in items)


#: What a message with nothing a provider takes ships as: no blocks at all, or only text
#: blocks that are empty or whitespace (OpenAI Chat refuses an assistant message with neither
#: content nor calls; Anthropic an empty turn, an empty text block and a text block of
#: whitespace only: "text content blocks must contain non-whitespace text").  A stored message
#: cannot be removed (the store is append-only), so it ships as this loud line, counted.
EMPTY_STAND_IN: Block = {
    "type": "text",
    "text": "[an empty message: it held no text, calls or other content]",
}


#: What a tool result marked as an error ships as when it holds nothing (no content, an empty
#: or whitespace string, or only empty or whitespace texts): Anthropic refuses such a result
#: ("content cannot be empty if is_error is true", the API's answer quoted in
#: https://github.com/bytedance/trae-agent/pull/231), so the error ships saying so, counted.
EMPTY_ERROR_RESULT = "[the tool reported an error and returned no output]"


def _blank_text(block: Block) -> bool:
    return block.get("type") == "text" and not str(block.get("text", "")).strip()


def _shipped_result(result: Block) -> Block:
    """Return the ``tool_result`` block ``result`` ships as (the input is not changed).

    Its empty or whitespace texts are left out (Anthropic refuses them inside a result as
    anywhere: "text content blocks must contain non-whitespace text").  A result left with
    nothing (no ``content``, ``None``, an empty or whitespace string, an empty list, or only
    blank texts) ships without ``content``: Anthropic's own SDK types ``content`` as optional
    (``ToolResultBlockParam``, anthropics/anthropic-sdk-python
    ``src/anthropic/types/tool_result_block_param.py``: only ``tool_use_id`` and ``type`` are
    required) and its tool-use guide shows an "empty tool result" of those two fields (quoted
    in https://github.com/stdapi-ai/stdapi.ai/issues/226), while an empty string has been
    refused (https://github.com/zed-industries/zed/pull/27130); OpenAI Chat and Responses
    render it as an empty text, which they take.  An error result left with nothing ships
    :data:`EMPTY_ERROR_RESULT` as its content instead.  Content of any other kind ships as it is.
    """
    content = result.get("content")
    if isinstance(content, list):
        kept = [b for b in content if not (isinstance(b, dict) and _blank_text(b))]
        if kept:
            return result if len(kept) == len(content) else {**result, "content": kept}
    elif isinstance(content, str):
        if content.strip():
            return result
    elif content is not None:
        return result
    shipped = {k: v for k, v in result.items() if k != "content"}
    if result.get("is_error"):
        shipped["content"] = EMPTY_ERROR_RESULT
    return shipped


def shipped_blocks(blocks: Iterable[Block], dropped: frozenset[str] = frozenset()) -> list[Block]:
    """Return the blocks one message ships as in a request format that drops ``dropped`` types.

    The blocks not of a ``dropped`` type, in order, without empty or whitespace texts
    (Anthropic refuses such a text block anywhere, and it says nothing), each ``tool_result``
    as :func:`_shipped_result` leaves it (its blank texts out; left with nothing, without
    ``content``, or :data:`EMPTY_ERROR_RESULT` for an error); when no block is left,
    the message ships as one loud stand-in instead, never as nothing:
    :data:`DROPPED_STAND_IN` when the format dropped some of its blocks, else
    :data:`EMPTY_STAND_IN`.  Renderers and :func:`blocks_text_tokens` both read it, so what is
    counted is what ships.

    Args:
        blocks: one message's blocks (the gated internal form).
        dropped: the format's ``dropped_block_types``.

    Returns:
        A new list of blocks (never empty); the input is not changed.
    """
    items = list(blocks)
    kept = [
        _shipped_result(b) if b.get("type") == "tool_result" else b
        for b in items
        if b.get("type") not in dropped and not _blank_text(b)
    ]
    if kept:
        return kept
    return [DROPPED_STAND_IN if any(b.get("type") in dropped for b in items) else EMPTY_STAND_IN]


#: Block types a renderer never joins into a message's text: OpenAI Chat ships a call in
#: ``tool_calls`` and a result as a ``tool`` message (Responses: items of their own);
#: Anthropic ships every block apart.
_SHIPPED_APART = frozenset({"tool_use", "tool_result"})


#: The blocks a ``tool_result`` holds that OpenAI ships as themselves (text joined into the
#: result's text, images after it); any other (a nested ``tool_result``, a ``thinking`` block,
#: an unknown type) ships as :func:`~compaction.blocks.unknown_block_text`, its whole JSON, which
#: its own count (a nested result's content, a thinking block's text) fell short of.
_RESULT_PARTS = frozenset({"text", "image"})


def _has_images(result: Block) -> bool:
    """Return whether a ``tool_result`` carries images (image blocks or ``data:`` URIs in its text)."""
    content = result.get("content", "")
    if isinstance(content, str):
        return ";base64," in content
    return any(
        inner.get("type") == "image" or (inner.get("type") == "text" and ";base64," in inner.get("text", ""))
        for inner in content
    )


def results_only(blocks: Sequence[Block]) -> bool:
    """Return whether ``blocks`` (a message's shipped blocks) are one or more tool results and nothing else.

    Results with images do not count: OpenAI Chat ships their images in a user message after
    the ``tool`` messages, a message with a frame of its own.
    """
    return bool(blocks) and all(b.get("type") == "tool_result" and not _has_images(b) for b in blocks)


def blocks_text_tokens(
    blocks: Iterable[Block], encoding: str = DEFAULT_ENCODING, dropped: frozenset[str] = frozenset()
) -> int:
    """Return the tokens of one message's blocks without images, framing and separators included.

    ``dropped`` names the block types the request format does not ship (OpenAI Chat:
    ``thinking`` and ``redacted_thinking``, see ``RequestFormat.dropped_block_types``); a
    message's blocks of those types count 0 and add no separator.

    A renderer may join a message's parts into one string (OpenAI Chat joins text parts with
    a blank line, tool-result parts with a newline): each join is counted as
    :data:`BLOCK_SEPARATOR` tokens, so the count stays an upper bound of the shipped text.
    Calls and results are never joined into a text, so no join is counted beside them (the
    Responses API ships an assistant turn's texts joined into one message before its calls).
    The blocks a ``tool_result`` holds are counted with their joins: texts and images as
    themselves, any other block (a nested result, a thinking block, an unknown type) as the
    JSON text OpenAI Chat ships it as (:func:`~compaction.blocks.unknown_block_text`).

    A message of tool results only, none with images (:func:`results_only`), counts no frame
    of its own and no joins between them: OpenAI Chat ships each result as its own ``tool``
    message (the Responses API as its own ``function_call_output`` item), each framed by the
    :func:`message_overhead` its result counts; Anthropic ships them as one user turn, whose
    frame those per-result frames more than cover.
    """
    shipped = shipped_blocks(blocks, dropped)  # a message of nothing ships as a stand-in
    total = 0 if results_only(shipped) else message_overhead(encoding)
    # Only a message's texts are joined into one string; its calls and results ship apart.
    joined = sum(1 for b in shipped if b.get("type") not in _SHIPPED_APART)
    total += BLOCK_SEPARATOR * max(0, joined - 1)
    pending: list[list[Block]] = []
    for block in shipped:
        total += _own_tokens(block, encoding)
        if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
            pending.append(block["content"])
    while pending:  # the blocks results hold, joined into the result's text
        items = pending.pop()
        total += BLOCK_SEPARATOR * max(0, len(items) - 1)
        for block in items:
            if block.get("type") in _RESULT_PARTS:
                total += _own_tokens(block, encoding)
            else:  # OpenAI ships any other block in a result as the loud text of its JSON
                total += _string_tokens(unknown_block_text(block), encoding)
    return total


def message_text_tokens(
    message: Message, encoding: str = DEFAULT_ENCODING, dropped: frozenset[str] = frozenset()
) -> int:
    """Return the tokens of ``message`` without its images, framing included (tokens).

    ``dropped``: block types not counted, as in :func:`blocks_text_tokens`.
    """
    return blocks_text_tokens(message.content, encoding, dropped)
