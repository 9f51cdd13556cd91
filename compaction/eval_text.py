"""Text helpers of ``compaction eval``: words, their rarity, the probe type and its matching.

A word is a run of 4+ letters, lowercased; common English words are not distinctive.  The
request text is every string of a JSON body (ids, types and image data left out; a string
that holds JSON, as OpenAI tool arguments do, decoded first), lowercased.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Literal, get_args

from .blocks import Block, Message

__all__ = [
    "ProbeKind",
    "PROBE_KINDS",
    "MATCH_SHARE",
    "MIN_WORDS",
    "Probe",
    "RequestText",
    "strings_of",
    "word_counts",
    "words",
    "Rarity",
    "short",
    "texts",
    "result_text",
]

ProbeKind = Literal["asks", "files", "errors", "decisions", "identifiers"]
PROBE_KINDS: tuple[ProbeKind, ...] = get_args(ProbeKind)

#: Share of a word probe's weight that its words present must carry for it to count as found.
MATCH_SHARE = 0.6
#: Fewest distinctive words a word probe needs.
MIN_WORDS = 2

_WORD = re.compile(r"[^\W\d_]{4,}")
_STOP = frozenset(
    """
    about above after again against also although always among another anything anyway around
    aren away back because been before being below between both cannot can't could couldn didn
    does doesn doing done down during each either else enough even ever every first from
    further going gonna good great have haven having here hers herself himself into itself just
    know last later least less like look made make many maybe might mine more most much must
    myself need needs never next none nope nothing okay once only onto other others ought ours
    over please pretty quite rather really right same seem seems shall shan should shouldn
    since some something still such sure than thank thanks that thats their theirs them
    themselves then there these they thing things think this those though through thus till
    together too under until upon very want wants wasn well went were weren what whatever when
    where whether which while whom whose will with within without won't wouldn would yeah year
    your yours yourself yourselves it's let's that's there's what's i'll i've i'm we'll
    """.split()
)

_SKIP_KEYS = frozenset(
    {"data", "signature", "type", "id", "tool_use_id", "tool_call_id", "role", "media_type"}
)


@dataclass(frozen=True)
class Probe:
    """One thing a later turn must know, and how to tell it survived.

    Attributes:
        kind: one of :data:`PROBE_KINDS`.
        text: what it stands for, for a person (the ask, the path, the error line, ...).
        seq: the position of the message it came from (0-based).
        words: distinctive words (asks, decisions, errors).
        weights: each word's weight, its inverse frequency in the history (see
            :meth:`Rarity.weight`); the probe is found when the words present carry at least
            60% of the total weight.
        needles: lowercased strings, any of which found verbatim finds the probe (files,
            identifiers).
        resolved: errors only: whether a later run of the same call succeeded.
    """

    kind: ProbeKind
    text: str
    seq: int
    words: tuple[str, ...] = ()
    weights: tuple[float, ...] = ()
    needles: tuple[str, ...] = ()
    resolved: bool | None = None

    def found(self, request: RequestText) -> bool:
        """Return whether this probe's content is in ``request``."""
        if self.words:
            present = sum(
                w for word, w in zip(self.words, self.weights, strict=True) if word in request.words
            )
            return present >= MATCH_SHARE * sum(self.weights) - 1e-9
        return any(needle in request.text for needle in self.needles)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"kind": self.kind, "text": self.text, "seq": self.seq}
        if self.words:
            data["words"] = list(self.words)
            data["weights"] = [round(w, 2) for w in self.weights]
        if self.needles:
            data["needles"] = list(self.needles)
        if self.resolved is not None:
            data["resolved"] = self.resolved
        return data


def strings_of(value: Any) -> Iterator[str]:
    """Yield every string inside ``value`` (dicts, lists), skipping ids, types and image data.

    A string that holds a JSON object or array (OpenAI tool arguments) is decoded and walked.
    """
    if isinstance(value, str):
        if value.startswith("data:image/"):
            return
        if value[:1] in "{[" and value[-1:] in "}]":
            try:
                decoded = json.loads(value)
            except ValueError:
                decoded = None
            if isinstance(decoded, (dict, list)):
                yield from strings_of(decoded)
                return
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if key not in _SKIP_KEYS:
                yield from strings_of(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_of(item)


class RequestText:
    """The text of a compiled request, lowercased, and its set of words."""

    def __init__(self, body: dict[str, Any]) -> None:
        self.text = "\n".join(strings_of(body)).lower()
        self.words = frozenset(_WORD.findall(self.text))


def words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOP]


def word_counts(messages: Sequence[Message]) -> Counter[str]:
    """Return how often each word (4+ letters, lowercased) occurs across the whole history."""
    counts: Counter[str] = Counter()
    for message in messages:
        for text in strings_of(list(message.content)):
            counts.update(_WORD.findall(text.lower()))
    return counts


class Rarity:
    """How rare each word is in one history: its count across every string of the history.

    Args:
        counts: the history's :func:`word_counts`.
    """

    def __init__(self, counts: Counter[str]) -> None:
        self.counts = counts
        self.total = max(1, sum(counts.values()))

    def weight(self, word: str) -> float:
        """Return ``ln(1 + W / count)``, W being the history's word count: rare words weigh most."""
        return math.log(1 + self.total / max(1, self.counts.get(word, 0)))

    def distinctive(self, text: str, limit: int, exclude: frozenset[str] = frozenset()) -> tuple[str, ...]:
        """Return the ``limit`` rarest words of ``text`` (ties: first in the text), ``exclude`` left out."""
        seen: dict[str, int] = {}
        for position, word in enumerate(words(text)):
            if word not in exclude:
                seen.setdefault(word, position)
        ranked = sorted(seen, key=lambda w: (self.counts.get(w, 0), seen[w]))
        return tuple(ranked[:limit])

    def probe(
        self, kind: ProbeKind, text: str, seq: int, chosen: tuple[str, ...], resolved: bool | None = None
    ) -> Probe:
        """Return a word probe for ``chosen`` words, each weighed by :meth:`weight`."""
        weights = tuple(self.weight(word) for word in chosen)
        return Probe(kind, short(text), seq, words=chosen, weights=weights, resolved=resolved)


def short(text: str, limit: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def texts(blocks: Iterable[Block], kind: str = "text") -> str:
    return "\n".join(
        b.get(kind, "") for b in blocks if b.get("type") == kind and isinstance(b.get(kind), str)
    )


def result_text(block: Block) -> str:
    content = block.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b["text"] for b in content if isinstance(b, dict) and isinstance(b.get("text"), str))
    return ""
