"""The offline extractive summarizer: a deterministic state record, no model needed.

For a chunk of raw messages (``kind`` ``"l1"`` or ``"split"``) it records, under fixed
headings: what the user asked; which tools ran on what, each with its outcome; errors seen;
decisions the assistant stated; what was left open; and the files and identifiers named.
For ``"merge"`` and ``"stitch"`` it unions the sections of the records it is given, keeps
``Open`` from the newest, and trims to the token bound, so summaries do not grow as levels
rise.  Same input, same output, byte for byte.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Any

from ..blocks import Block, canonical_json
from ..errors import SummarizerError
from ..tokens.counting import count_text
from ..types import RequestFormatName, SummaryKind
from ..wire import GatedRequest
from .base import SUMMARY_HEADINGS, SummaryResult

__all__ = ["ExtractiveSummarizer"]

# An error line in tool output: a line that *starts* like an error report, not source code
# that merely mentions errors (``catch (error)``).
_ERROR_RE = re.compile(
    r"^\s*(?:\w+(?:\.\w+)*)?(?:error|exception|fatal|panic)\b[:\s]|traceback \(most recent call last\)|"
    r"\bfailed\b|\bFAIL\b|command not found|no such file or directory|permission denied|exit (?:code|status) [1-9]",
    re.I,
)
_DECISION_RE = re.compile(
    r"\b(i'll|i will|let's|let me|decided|decision|plan|instead|because|root cause|the fix|the issue|"
    r"should|must|going to|approach)\b",
    re.I,
)
_PATH_RE = re.compile(r"(?<![\w/.-])(?:\.{0,2}/)?(?:[\w.-]+/)+[\w.-]+\.[A-Za-z0-9]{1,8}\b")
_RAN_RE = re.compile(r"Ran `([^`\n]*)`\n")
_EXIT_RE = re.compile(r"exited with code [1-9]|command cancelled")
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+|\n+")
_ARG_KEYS = ("path", "file_path", "filePath", "command", "cmd", "pattern", "query", "url", "file", "filename")


#: Any image data URI, even a cut one: summaries name images, they never carry their bytes.
_ANY_DATA_URI_RE = re.compile(r"data:image/[\w.+-]*;base64,[A-Za-z0-9+/=]*")


def _clip(text: str, limit: int) -> str:
    if ";base64," in text:
        text = _ANY_DATA_URI_RE.sub("[image data]", text)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _tool_argument(block: Block) -> str:
    value: Any = block.get("input", {})
    if isinstance(value, dict):
        for key in _ARG_KEYS:
            if isinstance(value.get(key), str) and value[key].strip():
                return _clip(value[key], 100)
        for item in value.values():
            if isinstance(item, str) and item.strip():
                return _clip(item, 100)
        return _clip(canonical_json(value), 100) if value else ""
    return _clip(str(value), 100)


def _result_text(block: Block) -> str:
    content = block.get("content", "")
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content if b.get("type") == "text")


def _outcome(block: Block) -> tuple[str, str | None]:
    """Return (outcome phrase, error line or None) of a tool_result."""
    text = _result_text(block)
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("```")]
    # Errors show at the start or the end of an output; the middle is usually content.
    window = lines[:5] + lines[-15:] if len(lines) > 20 else lines
    error_line = next((line for line in window if _ERROR_RE.search(line)), None)
    size = f"{len(lines)} lines" if len(lines) != 1 else "1 line"
    if block.get("is_error"):
        first = error_line or (lines[0] if lines else "no output")
        return f"error: {_clip(first, 120)}", _clip(first, 160)
    if not lines:
        return "no output", None
    summary = f"ok ({size}): {_clip(lines[0], 90)}"
    return summary, (_clip(error_line, 160) if error_line else None)


#: The smallest bound a record is held to, however little it covers (tokens).
MIN_SUMMARY_TOKENS = 32


#: The summary bound when a request carries no output cap (tokens).
DEFAULT_SUMMARY_TOKENS = 400


class ExtractiveSummarizer:
    """Summarize offline by extraction; deterministic; the default summarizer.

    It reads the gated request's blocks (not its payload), so it accepts a request in any
    format; it asks for OpenAI Chat bodies, the recipe's target model and the recipe's
    ``summary_max_tokens`` (``request_format = "openai"``, ``model = None``,
    ``max_output_tokens = None``), and holds nothing to close.

    Args:
        encoding: the encoding the summary's token bound is measured in.

    Example:
        >>> ExtractiveSummarizer().summarize(gated, kind="l1").text  # doctest: +SKIP
        'Asked:\\n- ...'
    """

    name = "extractive"
    request_format: RequestFormatName = "openai"
    model: str | None = None
    max_output_tokens: int | None = None

    def __init__(self, encoding: str = "o200k_base") -> None:
        self.encoding = encoding

    def close(self) -> None:
        """Do nothing: the extractive summarizer holds no resource."""

    def summarize(self, request: GatedRequest, *, kind: SummaryKind) -> SummaryResult:
        """Return the state record of ``request`` (see the module docstring).

        Args:
            request: the gated request; its ``max_output_tokens`` bounds the record (tokens;
                :data:`DEFAULT_SUMMARY_TOKENS` when it carries none).
            kind: ``"l1"``, ``"merge"``, ``"split"`` or ``"stitch"``.

        Returns:
            The record and its provenance (``summarizer``, ``request_sha256`` prefix, ``kind``).

        Raises:
            SummarizerError: an unknown kind, or the request holds nothing to summarize.
        """
        max_tokens = request.max_output_tokens or DEFAULT_SUMMARY_TOKENS
        messages = list(request.messages)
        if kind == "l1":
            sections = self._record(messages[:-1] if len(messages) > 1 else messages)
        elif kind == "split":
            sections = self._record_part(messages[:-1] if len(messages) > 1 else messages)
        elif kind in ("merge", "stitch"):
            sections = self._merge(messages)
        else:
            raise SummarizerError(
                f"unknown summary kind {kind!r}; expected 'l1', 'split', 'merge' or 'stitch'"
            )
        text = self._render(sections, self._bound(request, kind, max_tokens))
        if not text.strip():
            raise SummarizerError(f"the {kind} request held nothing to summarize")
        digest = hashlib.sha256(request.payload).hexdigest()[:16]
        return SummaryResult(text, {"summarizer": self.name, "request_sha256": digest, "kind": kind})

    def _bound(self, request: GatedRequest, kind: str, max_tokens: int) -> int:
        """Return the summary's token bound: ``max_tokens``, and well below what it covers.

        A record as long as its source saves nothing: an L1 or split record gets at most a
        quarter of the material's tokens, a merge or stitch half of its records' (never below
        :data:`MIN_SUMMARY_TOKENS`).
        """
        material = request.tokens - (count_text(request.system, self.encoding) if request.system else 0)
        share = material // 4 if kind in ("l1", "split") else material // 2
        return min(max_tokens, max(MIN_SUMMARY_TOKENS, share))

    # -- level 1 ---------------------------------------------------------------------------
    def _record(self, messages: Sequence[tuple[str, Sequence[Block]]]) -> dict[str, list[str]]:
        sections: dict[str, list[str]] = {h: [] for h in SUMMARY_HEADINGS}
        calls: dict[str, str] = {}
        identifiers: list[str] = []
        last_assistant = ""

        def note_paths(text: str) -> None:
            for path in _PATH_RE.findall(text[:20000]):
                if path not in identifiers and not path.startswith(("http", "www.")):
                    identifiers.append(path)

        for role, blocks in messages:
            for block in blocks:
                kind = block.get("type")
                if kind == "text":
                    text = block["text"]
                    if role == "user":
                        if text.startswith("[") and "summar" in text[:80].lower():
                            continue
                        ran = _RAN_RE.match(text)
                        if ran:  # a command the user ran (pi's "Ran `cmd`" rendering)
                            fake = {
                                "content": text[ran.end() :],
                                "is_error": bool(_EXIT_RE.search(text[-300:])),
                            }
                            outcome, error = _outcome(fake)
                            sections["Done"].append(f"user ran `{_clip(ran.group(1), 100)}` → {outcome}")
                            if error:
                                sections["Errors"].append(f"`{_clip(ran.group(1), 60)}`: {error}")
                            continue
                        sections["Asked"].append(_clip(text, 240))
                    elif role == "assistant":
                        last_assistant = text
                        picked = 0
                        for sentence in _SENTENCE_RE.split(text):
                            if picked < 2 and len(sentence) > 20 and _DECISION_RE.search(sentence):
                                sections["Decisions"].append(_clip(sentence, 180))
                                picked += 1
                    note_paths(text)
                elif kind == "tool_use":
                    argument = _tool_argument(block)
                    calls[block["id"]] = f"{block['name']} {argument}".strip()
                    note_paths(canonical_json(block.get("input", {})))
                elif kind == "tool_result":
                    call = calls.pop(block["tool_use_id"], f"tool call {block['tool_use_id']}")
                    outcome, error = _outcome(block)
                    sections["Done"].append(f"{call} → {outcome}")
                    if error:
                        sections["Errors"].append(f"{call}: {error}")
        for call in calls.values():
            sections["Done"].append(f"{call} → no result in this part")
        if last_assistant:
            tail = [s for s in _SENTENCE_RE.split(last_assistant) if s.strip()]
            if tail and (
                tail[-1].rstrip().endswith("?")
                or re.search(r"\b(next|todo|remaining|then)\b", tail[-1], re.I)
            ):
                sections["Open"].append(_clip(tail[-1], 200))
        if messages and messages[-1][0] == "user":
            last_texts = [b["text"] for b in messages[-1][1] if b.get("type") == "text"]
            if last_texts and _clip(last_texts[-1], 240) not in sections["Asked"]:
                sections["Open"].append("latest request: " + _clip(last_texts[-1], 200))
        sections["Identifiers"] = [", ".join(identifiers[:25])] if identifiers else []
        if last_assistant.strip() and not any(sections.values()):
            # a range holding only an assistant statement (a chunk split down to one message)
            # still gets a record, or the whole chunk would stay raw as a summarizer failure
            sections["Done"].append("assistant said: " + _clip(last_assistant, 240))
        return sections

    def _record_part(self, messages: Sequence[tuple[str, Sequence[Block]]]) -> dict[str, list[str]]:
        """Record one part of an oversized round: what it is, its size, errors and names in it."""
        sections: dict[str, list[str]] = {h: [] for h in SUMMARY_HEADINGS}
        texts = [b["text"] for _role, blocks in messages for b in blocks if b.get("type") == "text"]
        if not texts:
            return sections
        header, body = texts[0], "\n".join(texts[1:])
        lines = [line for line in body.splitlines() if line.strip() and not line.startswith("```")]
        first = next((line for line in lines if not line.startswith("[")), lines[0] if lines else "")
        sections["Done"].append(f"{_clip(header, 160)} {len(lines)} lines; first: {_clip(first, 120)}")
        for marker in (line for line in lines if line.startswith("[") and " called tool " in line):
            sections["Done"].append(_clip(marker, 200))
        errors = [line for line in lines if _ERROR_RE.search(line)]
        sections["Errors"].extend(_clip(line, 160) for line in errors[:3])
        names: list[str] = []
        for path in _PATH_RE.findall(body[:20000]):
            if path not in names:
                names.append(path)
        sections["Identifiers"] = [", ".join(names[:12])] if names else []
        return sections

    # -- merge -----------------------------------------------------------------------------
    def _merge(self, messages: Sequence[tuple[str, Sequence[Block]]]) -> dict[str, list[str]]:
        records = [
            block["text"]
            for role, blocks in messages
            if role == "user"
            for block in blocks
            if block.get("type") == "text" and not block["text"].startswith("Merge the")
        ]
        parsed = [self._parse(text) for text in records]
        sections: dict[str, list[str]] = {h: [] for h in SUMMARY_HEADINGS}
        for record in parsed:
            for heading in SUMMARY_HEADINGS:
                if heading in ("Open", "Identifiers"):
                    continue
                for line in record.get(heading, []):
                    if line not in sections[heading]:
                        sections[heading].append(line)
        if parsed:
            sections["Open"] = list(parsed[-1].get("Open", []))
        names: list[str] = []
        for record in parsed:
            for line in record.get("Identifiers", []):
                for name in line.split(", "):
                    if name and name not in names:
                        names.append(name)
        sections["Identifiers"] = [", ".join(names[:25])] if names else []
        return sections

    @staticmethod
    def _parse(text: str) -> dict[str, list[str]]:
        record: dict[str, list[str]] = {}
        heading: str | None = None
        for line in text.splitlines():
            stripped = line.strip()
            if stripped.endswith(":") and stripped[:-1] in SUMMARY_HEADINGS:
                heading = stripped[:-1]
                record.setdefault(heading, [])
            elif heading and stripped.startswith("- "):
                item = stripped[2:]
                if not item.startswith("… "):
                    record[heading].append(item)
        return record

    # -- rendering within the bound ----------------------------------------------------------
    def _render(self, sections: dict[str, list[str]], max_tokens: int) -> str:
        lines = {h: list(items) for h, items in sections.items() if items}
        omitted = {h: 0 for h in lines}

        def text() -> str:
            out: list[str] = []
            for heading, items in lines.items():
                out.append(f"{heading}:")
                out.extend(f"- {item}" for item in items)
                if omitted[heading]:
                    out.append(f"- … {omitted[heading]} more")
            return "\n".join(out)

        costs = {h: [count_text(f"- {i}\n", self.encoding) for i in items] for h, items in lines.items()}

        def approx() -> int:
            return (
                sum(sum(c) for c in costs.values())
                + 3 * len(lines)
                + 6 * sum(1 for v in omitted.values() if v)
            )

        target = max_tokens
        while lines:
            progressed = True
            while progressed and approx() > target:
                progressed = self._drop_one(lines, costs, omitted, max_tokens)
            exact = count_text(text(), self.encoding)
            if exact <= max_tokens or not progressed:
                break
            target -= exact - max_tokens
        return text()

    def _drop_one(
        self,
        lines: dict[str, list[str]],
        costs: dict[str, list[int]],
        omitted: dict[str, int],
        max_tokens: int,
    ) -> bool:
        """Shorten or drop one line of the largest section; return False when nothing is left."""
        candidates = [h for h in lines if lines[h]]
        if not candidates:
            return False
        heading = max(candidates, key=lambda h: (sum(costs[h]), h))
        if heading == "Identifiers":
            names = lines[heading][0].split(", ")
            if len(names) <= 1:
                lines[heading].pop()
                costs[heading].pop()
            else:
                lines[heading][0] = ", ".join(names[: len(names) // 2])
                costs[heading][0] = count_text(f"- {lines[heading][0]}\n", self.encoding)
            return True
        # drop from the middle: keep the first and the newest items of each section
        middle = len(lines[heading]) // 2
        removed = lines[heading].pop(middle)
        cost = costs[heading].pop(middle)
        if len(removed) > 60 and cost > max_tokens // 4:
            shorter = _clip(removed, max(40, len(removed) // 2))
            lines[heading].insert(middle, shorter)
            costs[heading].insert(middle, count_text(f"- {shorter}\n", self.encoding))
        else:
            omitted[heading] += 1
        return True
