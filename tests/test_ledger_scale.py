"""The ask ledger's caches give the bytes a from-scratch build gives (compile at large budgets).

``compile_request`` prices the ledger at every candidate cut, so the ledger keeps per-store
caches (asks read once, each message's names read once by seq, counts per cut).  These
tests compare :func:`compaction.ledger.ledger_for` on generated stores, at cuts asked in any
order and at several shares, with a reference that reads everything again on every call and
uses the names regex as it stood before the caches (kept here, written out).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import compaction.ledger as ledger_module
import compaction.names_index as names_index
from compaction import Message, Store
from compaction.asks import ask_from_texts
from compaction.blocks import DATA_URI_RE, iter_strings
from compaction.evidence import identifiers
from compaction.ledger import NAMES_SHARE, Ask, asks_before, ledger_for, ledger_text
from compaction.tokens.counting import count_text

ENC = "o200k_base"

# -- the reference: everything read again on every call ------------------------------------

_REF_IDENTIFIER = re.compile(
    r"https?://[^\s<>\"'`)\]}]+"
    r"|\b[A-Z][A-Z0-9]{1,9}-\d+\b"
    r"|\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b"
    r"|\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b"
    r"|\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b"
    r"|\b[a-z][a-z0-9]*[A-Z][A-Za-z0-9]*\b"
    r"|\b[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*\b"
    r"|(?<=\bdef )\w+|(?<=\bfunction )\w+|(?<=\bfn )\w+|(?<=\bfunc )\w+"
)
_REF_TICKET = re.compile(r"[A-Z][A-Z0-9]{1,9}-\d+")
_REF_NOT_TICKETS = frozenset({"UTF", "SHA", "ISO", "GPT", "MD", "X", "P"})


def _ref_identifiers(text: str) -> Iterator[str]:
    for match in _REF_IDENTIFIER.finditer(text):
        token = match.group(0).rstrip(".,;:")
        if len(token) < 5:
            continue
        if _REF_TICKET.fullmatch(token) and token.split("-")[0] in _REF_NOT_TICKETS:
            continue
        yield token


def _ref_message_names(message: Message) -> tuple[str, ...]:
    if message.role == "system" or message.meta.get("kind") == "tool_output":
        return ()
    found: dict[str, None] = {}
    for block in message.content:
        kind = block.get("type")
        if kind in ("text", "thinking"):
            text = block.get("text") or block.get("thinking") or ""
            parts = [text] if isinstance(text, str) else []
        elif kind == "tool_use":
            parts = list(iter_strings(block.get("input")))
        else:
            continue
        for part in parts:
            if ";base64," in part:
                continue
            for name in _ref_identifiers(part):
                limit = 256 if name.startswith(("http://", "https://")) else 80
                if len(name) <= limit:
                    found.setdefault(name, None)
    return tuple(found)


def _ref_asks(store: Store, cut: int) -> list[Ask]:
    asks: list[Ask] = []
    seen: set[str] = set()
    for turn in store.prompt_texts(0, cut):
        text = ask_from_texts("\n".join(turn.texts), turn.kind)
        if text and ";base64," in text:
            text = DATA_URI_RE.sub(
                lambda m: f"[an image pasted as a data: URI, {len(m.group(0))} characters, not shown here]",
                text,
            ).strip()
        if not text:
            continue
        key = " ".join(text.lower().split())
        if key not in seen:
            seen.add(key)
            asks.append(Ask(turn.seq, text))
    return asks


def _ref_names_text(store: Store, cut: int, share_tokens: int, shown: str | None) -> str | None:
    if share_tokens < names_index.MIN_SHARE_TOKENS:
        return None
    cut = max(0, min(cut, store.next_seq()))
    start = max(0, cut - names_index.WINDOW)
    counts: Counter[str] = Counter()
    first: dict[str, int] = {}
    for offset, message in enumerate(store.messages(start, cut)):
        for name in _ref_message_names(message):
            counts[name] += 1
            first.setdefault(name, start + offset)
    already = set(_ref_identifiers(shown)) if shown else set()
    ranked = sorted(
        (n for n, c in counts.items() if c >= names_index.MIN_MESSAGES and n not in already),
        key=lambda n: (-counts[n], first[n], n),
    )
    best = None
    for n in range(1, len(ranked) + 1):  # the most names whose line fits, counted one by one
        line = f"{names_index.NAMES_INTRO}\n{' '.join(ranked[:n])}"
        if count_text(line, ENC) <= share_tokens:
            best = line
    return best


def _ref_ledger(store: Store, cut: int, cap: int, share_tokens: int) -> str | None:
    text = ledger_text(_ref_asks(store, cut), cap=cap, share_tokens=share_tokens, encoding=ENC)
    names = _ref_names_text(store, cut, int(share_tokens * NAMES_SHARE), text)
    if names is not None:
        text = names if text is None else f"{text}\n\n{names}"
    return text


# -- generated stores -------------------------------------------------------------------------

_NAMES = [
    "fetch_rows",
    "parseConfig",
    "StoreReader",
    "MAX_RETRIES",
    "JIRA-1234",
    "deadbeef12",
    "load_rows",
    "https://example.org/a_b",
    "UTF-8",
    "renderPage",
    "def build_index",
    "SHA-256",
]
_WORDS = ["fix", "the", "bug", "in", "please", "run", "tests", "again", "and", "then", "check", "it", "\n"]
_word = st.sampled_from(_NAMES + _WORDS)
_text = st.lists(_word, min_size=1, max_size=12).map(" ".join)


@st.composite
def _message(draw: st.DrawFn) -> list[Message]:
    kind = draw(st.sampled_from(["user", "assistant", "call", "system"]))
    text = draw(_text)
    if kind == "user":
        return [Message("user", ({"type": "text", "text": text},))]
    if kind == "assistant":
        return [Message("assistant", ({"type": "text", "text": text},))]
    if kind == "system":
        return [Message("system", ({"type": "text", "text": text},))]
    call_id = f"call_{draw(st.integers(0, 10**6))}"
    return [
        Message(
            "assistant", ({"type": "tool_use", "id": call_id, "name": "bash", "input": {"command": text}},)
        ),
        Message("user", ({"type": "tool_result", "tool_use_id": call_id, "content": draw(_text)},)),
    ]


def _store(batches: list[list[Message]]) -> Store:
    store = Store(":memory:")
    for index, batch in enumerate(batches):
        store.append(batch, chain_seed=f"batch-{index}")
    return store


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(_message(), min_size=1, max_size=40),
    st.lists(st.integers(0, 60), min_size=1, max_size=8),
    st.sampled_from([(8, 400), (8, 4000), (30, 900), (4, 120)]),
    st.integers(2, 9),
)
def test_ledger_for_at_cuts_in_any_order_equals_a_build_from_scratch(
    batches: list[list[Message]], cuts: list[int], settings_: tuple[int, int], window: int
) -> None:
    """Invariant: the cached ledger (asks and names index) is byte-identical to one built from scratch,
    whatever cuts were asked before on the same store object (a small window makes the names
    index slide over kept and unread seqs)."""
    cap, share = settings_
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(names_index, "WINDOW", window)
        patch.setattr(names_index, "_PAGE", 3)
        store = _store(batches)
        try:
            n = store.next_seq()
            for cut in cuts:
                cut = min(cut, n)
                expected = _ref_ledger(store, cut, cap, share)
                assert ledger_for(store, cut, cap=cap, share_tokens=share, encoding=ENC) == expected
                assert asks_before(store, cut) == _ref_asks(store, cut)
        finally:
            store.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_message(), min_size=1, max_size=20), st.lists(_message(), min_size=1, max_size=20))
def test_ledger_after_appends_equals_a_build_from_scratch(
    first: list[list[Message]], more: list[list[Message]]
) -> None:
    """Invariant: appending messages after a ledger was built leaves every later ledger equal to a fresh build."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(names_index, "WINDOW", 5)
        store = _store(first)
        try:
            old_cut = store.next_seq()
            cut = old_cut
            assert ledger_for(store, cut, cap=8, share_tokens=900, encoding=ENC) == _ref_ledger(
                store, cut, 8, 900
            )
            for index, batch in enumerate(more):
                store.append(batch, chain_seed=f"more-{index}")
            for cut in (store.next_seq(), old_cut, store.next_seq() // 2):
                assert ledger_for(store, cut, cap=8, share_tokens=900, encoding=ENC) == _ref_ledger(
                    store, cut, 8, 900
                )
        finally:
            store.close()


@given(
    st.lists(st.sampled_from([*"abcdefAZ_-019 .:/\n", "def ", "http://", "fn ", "UTF-8"]), max_size=40).map(
        "".join
    )
)
def test_identifiers_equal_the_reference_regex(text: str) -> None:
    """Invariant: :func:`compaction.evidence.identifiers` yields what the regex it had before yields."""
    assert list(identifiers(text)) == list(_ref_identifiers(text))


def test_a_names_index_of_a_long_stretch_reads_each_message_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Cuts moving through a long history scan each message for names once, not once per cut."""
    scanned: list[int] = []
    real = names_index.message_names

    def counting(message: Message) -> tuple[str, ...]:
        scanned.append(1)
        return real(message)

    monkeypatch.setattr(names_index, "message_names", counting)
    monkeypatch.setattr(names_index, "WINDOW", 50)
    batches = [
        [Message("user", ({"type": "text", "text": f"fix fetch_rows and load_rows_{i % 7}"},))]
        for i in range(300)
    ]
    store = _store(batches)
    try:
        for cut in range(60, 301, 7):
            names_index.names_text(store, cut, share_tokens=200, encoding=ENC)
        # the windows [cut - 50, cut) of cuts 60, 67, ..., 298 cover seqs 10..297: each read once
        assert len(scanned) == 288
        text = names_index.names_text(store, 300, share_tokens=200, encoding=ENC)
        assert text == _ref_names_text(store, 300, 200, None)
        assert text is not None and "fetch_rows" in text
    finally:
        store.close()


@given(
    st.lists(
        st.sampled_from([*"abcdAZ_-09 .:/\n", "\n\n", "def ", "def", "http://", "deadbeef1"]), max_size=40
    ).map("".join)
)
def test_the_names_of_a_text_are_those_of_its_paragraphs(text: str) -> None:
    """Invariant the names index's paragraph cache rests on: no name spans a blank line."""
    whole = set(identifiers(text))
    assert whole == set().union(*(set(identifiers(part)) for part in text.split("\n\n")))
    assert names_index._shown_names(names_index._Scan(), text) == whole


_line = st.lists(
    st.sampled_from([*"aZ09 .)]/'\n\t\r-…", "[", "'s", "  ", "\n\n", "é", "日本", "[Message 3] ", "def x"]),
    max_size=12,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(_line, min_size=1, max_size=6),
    st.sampled_from(["o200k_base", "cl100k_base"]),
    st.booleans(),
)
def test_a_joined_ledger_counts_as_its_lines_counted_with_their_joins(
    lines: list[str], encoding: str, bracketed: bool
) -> None:
    """Invariant of ledger._lines_tokens: the kept per-line counts equal the joined text's count."""
    if bracketed:
        lines = [lines[0], *("[" + line for line in lines[1:])]
    assert ledger_module._lines_tokens(lines, encoding) == count_text("\n\n".join(lines), encoding)
