"""The ask ledger: every human ask rides in the compiled request, verbatim up to a cap, ahead of the summaries."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import CapturingSummarizer, histories, payload_json

from compaction import Message, OverBudget, Recipe, Store, compile_request, compress_and_compile
from compaction.asks import ask_text
from compaction.ledger import (
    ASK_ROOM_SHARE,
    LEDGER_INTRO,
    Ask,
    asks_before,
    head_tail,
    ledger_text,
    room_caps,
)
from compaction.planning import SUMMARY_INTRO
from compaction.tokens.counting import count_text

ENC = "o200k_base"
LEFT_OUT = re.compile(r"asks \(messages? (\d+)(?:–(\d+))?\) are left out of this list")


def _user(text: str) -> Message:
    return Message("user", ({"type": "text", "text": text},))


def _assistant(text: str) -> Message:
    return Message("assistant", ({"type": "text", "text": text},))


def _request_text(compiled: Any) -> str:
    body = payload_json(compiled.request.payload)
    return json.dumps(body, ensure_ascii=False)


def _summary_message_texts(compiled: Any) -> list[str]:
    """Return the text blocks of the request's first user message (Anthropic keeps them apart)."""
    body = payload_json(compiled.request.payload)
    first = next(m for m in body["messages"] if m["role"] == "user")
    content = first["content"]
    return [content] if isinstance(content, str) else [p["text"] for p in content if p.get("type") == "text"]


def _ledger_of(compiled: Any) -> str:
    """Return the ledger text of a compiled request in either format ("" when it has none)."""
    if not compiled.summaries:
        return ""
    joined = "\n\n".join(_summary_message_texts(compiled))
    return joined.split(SUMMARY_INTRO)[0] if joined.startswith(LEDGER_INTRO) else ""


def test_head_tail_keeps_short_asks_whole_and_cuts_long_ones_loudly() -> None:
    assert head_tail("fix the login bug", 50, ENC, 3) == "fix the login bug"
    long = " ".join(f"requirement{i} must hold" for i in range(400))
    shown = head_tail(long, 90, ENC, 12)
    assert shown.startswith("requirement0 must hold")
    assert shown.rstrip().endswith("requirement399 must hold")
    assert "tokens of this ask cut here; message 12 holds it whole" in shown
    cut = int(shown.split("[… ")[1].split(" tokens")[0])
    kept = count_text(long, ENC) - cut
    assert 60 <= kept <= 90


def test_ledger_text_lists_asks_oldest_first_within_the_share() -> None:
    asks = [Ask(1, "build the parser for the billing export"), Ask(9, "now add retries to the uploader")]
    text = ledger_text(asks, cap=200, share_tokens=1000, encoding=ENC)
    assert text is not None
    assert text.startswith(LEDGER_INTRO)
    assert text.index("[Message 1] build the parser") < text.index("[Message 9] now add retries")


def test_ledger_over_its_share_shortens_then_leaves_out_the_oldest_and_says_so() -> None:
    asks = [Ask(i * 10, f"ask number {i}: " + "please handle the edge case carefully " * 20) for i in range(12)]
    whole = ledger_text(asks, cap=400, share_tokens=100_000, encoding=ENC)
    assert whole is not None and "shortened" not in whole
    share = count_text(whole, ENC) // 2
    tight = ledger_text(asks, cap=400, share_tokens=share, encoding=ENC)
    assert tight is not None
    assert count_text(tight, ENC) + 1 <= share
    assert "shortened to their first words" in tight
    assert "[Message 110] ask number 11: " + "please handle the edge case carefully " * 19 in tight  # newest whole
    tiny = ledger_text(asks, cap=400, share_tokens=120, encoding=ENC)
    assert tiny is not None and "older asks (messages 0–" in tiny and "are left out of this list" in tiny
    assert count_text(tiny, ENC) + 1 <= 120
    none_fit = ledger_text(asks, cap=400, share_tokens=10, encoding=ENC)
    assert none_fit is not None and none_fit.startswith(LEDGER_INTRO + "\n\n[12 asks (messages 0–110) are left out of this list")
    assert ledger_text([], cap=400, share_tokens=1000, encoding=ENC) is None


def test_asks_skip_harness_text_and_repeats_and_data_uris() -> None:
    store = Store(":memory:")
    store.append(
        [
            _user("<system-reminder>be nice</system-reminder>"),
            _user("Deploy the staging cluster tonight"),
            _assistant("ok"),
            _user("Deploy the staging cluster tonight"),
            _user("look at data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR4nGNgBAAAAwACS/Xd6gAAAABJRU5ErkJggg== please"),
        ]
    )
    asks = asks_before(store, store.next_seq())
    assert [a.seq for a in asks] == [1, 4]
    assert "iVBORw0KGgo" not in asks[1].text and "[an image pasted as a data: URI" in asks[1].text
    assert asks_before(store, 2) == asks[:1]  # cut-bounded, from the same cache


def _long_history(asks: list[str], filler_words: int = 300) -> list[Message]:
    messages: list[Message] = [Message("system", ({"type": "text", "text": "You are a build agent."},))]
    for index, ask in enumerate(asks):
        messages.append(_user(ask))
        for step in range(3):
            messages.append(_assistant(f"step {index}.{step}: " + " ".join(f"word{(index * 7 + step + k) % 97}" for k in range(filler_words))))
            messages.append(_user(f"continue {index}.{step}"))
    return messages


def test_every_ask_of_a_summarized_stretch_is_in_the_request_ahead_of_the_summaries() -> None:
    asks = [f"Ask {i}: implement the {name} module with tests" for i, name in enumerate(["alpha", "beta", "gamma", "delta", "epsilon", "zeta"])]
    store = Store(":memory:")
    store.append(_long_history(asks))
    recipe = Recipe(budget_tokens=3000, chunk_target_tokens=600, output_format="anthropic")
    compiled, _ticks = compress_and_compile(store, recipe, summarizer=CapturingSummarizer(), mode="replan")
    assert compiled.summaries and compiled.live_start > 0
    texts = _summary_message_texts(compiled)
    assert texts[0].startswith(LEDGER_INTRO) and texts[1] == SUMMARY_INTRO
    request = _request_text(compiled)
    for ask in asks:
        assert ask in request
    assert compiled.ledger_tokens > 0
    assert compiled.tokens <= 3000
    # the ledger lists only asks before the live window: the raw ones are not repeated
    for seq in range(compiled.live_start, store.next_seq()):
        assert f"[Message {seq}]" not in texts[0]


def test_ledger_off_leaves_the_summary_message_as_it_was() -> None:
    store = Store(":memory:")
    store.append(_long_history([f"Ask {i}: do thing number {i} carefully" for i in range(5)]))
    recipe = Recipe(budget_tokens=3000, chunk_target_tokens=600, ask_ledger=False, output_format="anthropic")
    compiled, _ = compress_and_compile(store, recipe, summarizer=CapturingSummarizer(), mode="replan")
    assert compiled.summaries
    assert _summary_message_texts(compiled)[0] == SUMMARY_INTRO
    assert compiled.ledger_tokens == 0


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    messages=histories(min_turns=4, max_turns=14),
    budget=st.integers(min_value=400, max_value=5000),
    share=st.sampled_from([0.05, 0.25, 0.5]),
    cap=st.integers(min_value=16, max_value=200),
    output=st.sampled_from(["openai", "anthropic"]),
)
def test_every_human_ask_is_in_the_request_or_loudly_marked(
    messages: list[Message], budget: int, share: float, cap: int, output: str
) -> None:
    """Each ask is raw in the live window, listed in the ledger (whole or cut loudly), shortened or counted loudly."""
    store = Store(":memory:")
    try:
        store.append(messages)
        recipe = Recipe(budget_tokens=budget, ledger_share=share, ask_cap_tokens=cap, chunk_target_tokens=200, output_format=output)  # type: ignore[arg-type]
        try:
            compiled, _ = compress_and_compile(store, recipe, summarizer=CapturingSummarizer())
        except OverBudget:
            return
        ledger = _ledger_of(compiled)
        stored = store.messages()
        asks = asks_before(store, compiled.live_start)
        assert bool(ledger) == bool(asks)
        for ask in asks:
            if f"[Message {ask.seq}] " in ledger:
                continue
            left_out = LEFT_OUT.search(ledger)
            assert left_out, (ask, ledger)
            low, high = int(left_out.group(1)), int(left_out.group(2) or left_out.group(1))
            assert low <= ask.seq <= high
        for seq in range(compiled.live_start, store.next_seq()):
            if ask_text(stored[seq]):
                assert f"[Message {seq}] " not in ledger
    finally:
        store.close()


def test_ledger_is_byte_stable_between_events() -> None:
    store = Store(":memory:")
    store.append(_long_history([f"Ask {i}: build feature {i}" for i in range(6)]))
    recipe = Recipe(budget_tokens=3000, chunk_target_tokens=600)
    first, _ = compress_and_compile(store, recipe, summarizer=CapturingSummarizer())
    store.append([_assistant("done with that"), _user("Ask 99: and one more small thing")])
    second, ticks = compress_and_compile(store, recipe, summarizer=CapturingSummarizer())
    if ticks:
        pytest.fail("the second turn should append, not compact")
    assert _ledger_of(second) == _ledger_of(first) != ""
    assert "Ask 99" not in _ledger_of(second)  # raw in the live window instead
    assert "Ask 99: and one more small thing" in _request_text(second)


def test_compile_request_prices_the_ledger_exactly() -> None:
    store = Store(":memory:")
    store.append(_long_history([f"Ask {i}: 日本語のテキスト {i} and emoji 🎉" for i in range(6)]))
    recipe = Recipe(budget_tokens=2500, chunk_target_tokens=500)
    compress_and_compile(store, recipe, summarizer=CapturingSummarizer(), mode="replan")
    compiled = compile_request(store, recipe)
    assert compiled.planned_tokens == compiled.tokens


def _pasted(seq: int, lines: int) -> Ask:
    """An ask with a long paste: a request line, then numbered log lines, then a closing line."""
    body = "\n".join(f"line {i}: worker{i} raised TimeoutError after {i * 13 % 997} ms" for i in range(lines))
    return Ask(seq, f"Why does the nightly export fail? Here is the log:\n{body}\nPlease fix the retry loop.")


def test_an_ask_over_the_cap_shows_whole_when_the_ledger_has_room() -> None:
    long = _pasted(7, 60)
    tokens = count_text(long.text, ENC)
    assert tokens > 600
    asks = [Ask(1, "set up the export job for the billing tables"), long]
    share = int(tokens / ASK_ROOM_SHARE) + 2  # an eighth of the room holds the ask whole
    text = ledger_text(asks, cap=600, share_tokens=share, encoding=ENC)
    assert text is not None
    assert "cut here" not in text
    assert "[Message 7] " + "\n  ".join(long.text.split("\n")) in text
    assert count_text(text, ENC) + 1 <= share
    # with an eighth of the room below the ask, it is cut at the larger of that and the cap
    smaller = ledger_text(asks, cap=600, share_tokens=share - 200, encoding=ENC)
    assert smaller is not None and "tokens of this ask cut here; message 7 holds it whole" in smaller
    cut = int(smaller.split("[… ")[1].split(" tokens")[0])
    assert tokens - cut > 600


def test_with_less_room_the_cap_is_the_largest_halving_that_fits() -> None:
    asks = [_pasted(i * 5, 200) for i in range(10)]
    tokens = count_text(asks[0].text, ENC)
    room_share = 8 * tokens  # an eighth of the room: one ask whole; ten of them do not fit
    text = ledger_text(asks, cap=100, share_tokens=room_share, encoding=ENC)
    assert text is not None and count_text(text, ENC) + 1 <= room_share
    caps = room_caps(100, room_share - 1)
    assert caps[0] == int((room_share - 1) * ASK_ROOM_SHARE) and caps[1] == caps[0] // 2
    kept = [tokens - int(part.split(" tokens")[0]) for part in text.split("[… ")[1:]]
    assert len(kept) == 10  # every ask cut, at one cap
    chosen = min(c for c in caps if c >= max(kept))  # head and tail keep a few tokens under the cap
    assert chosen < caps[0] and min(kept) > chosen - 16
    assert chosen > 100 and "shortened" not in text


def test_short_of_room_the_configured_cap_cuts_and_the_oldest_are_shortened() -> None:
    asks = [_pasted(i * 10, 40) for i in range(6)]
    share = 400  # room caps 399 and 199: six asks at either do not fit, nor at the configured 100
    text = ledger_text(asks, cap=100, share_tokens=share, encoding=ENC)
    assert text is not None and count_text(text, ENC) + 1 <= share
    assert "shortened to their first words" in text
    newest = text.split("[Message 50] ")[1]
    assert "tokens of this ask cut here; message 50 holds it whole" in newest
    assert count_text(newest, ENC) <= 100 + 40  # head and tail within the configured cap, plus the marker


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(st.integers(min_value=0, max_value=120), min_size=1, max_size=6),
    cap=st.integers(min_value=16, max_value=400),
    share=st.integers(min_value=40, max_value=20000),
)
def test_the_ledger_fits_its_share_and_cuts_an_ask_only_past_its_room(lines: list[int], cap: int, share: int) -> None:
    asks = [_pasted(i * 3, n) if n else Ask(i * 3, f"rename module{i} to service{i}") for i, n in enumerate(lines)]
    text = ledger_text(asks, cap=cap, share_tokens=share, encoding=ENC)
    assert text is not None
    per_ask = max(cap, int((share - 1) * ASK_ROOM_SHARE))
    within = "\n\n".join([LEDGER_INTRO, *(f"[Message {a.seq}] " + "\n  ".join(head_tail(a.text, per_ask, ENC, a.seq).split("\n")) for a in asks)])
    if count_text(within, ENC) + 1 <= share:
        assert text == within  # each ask whole up to its room, none shortened
    elif "are left out of this list: the ask ledger's share" not in text:  # the note-only case may pass
        assert count_text(text, ENC) + 1 <= share
    assert text == ledger_text(asks, cap=cap, share_tokens=share, encoding=ENC)  # deterministic
