"""The names index: the recurring names of the summarized stretch, beside the ask ledger, byte-stable."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import compaction.names_index as names_index
from compaction import Message, Recipe, Store, compress_and_compile
from compaction.ledger import LEDGER_INTRO, ledger_for
from compaction.names_index import (
    MAX_NAME_CHARS,
    MAX_URL_CHARS,
    MIN_SHARE_TOKENS,
    NAMES_INTRO,
    message_names,
    names_before,
    names_text,
)
from compaction.tokens.counting import count_text

ENC = "o200k_base"


def _user(text: str) -> Message:
    return Message("user", ({"type": "text", "text": text},))


def _assistant(text: str) -> Message:
    return Message("assistant", ({"type": "text", "text": text},))


def _call(call_id: str, command: str) -> Message:
    return Message(
        "assistant", ({"type": "tool_use", "id": call_id, "name": "bash", "input": {"command": command}},)
    )


def _result(call_id: str, output: str) -> Message:
    return Message("user", ({"type": "tool_result", "tool_use_id": call_id, "content": output},))


def test_names_come_from_text_and_call_arguments_not_from_tool_output_or_system() -> None:
    assert message_names(_assistant("I'll call fetch_rows, then fetch_rows again and parseConfig.")) == (
        "fetch_rows",
        "parseConfig",
    )
    assert message_names(_call("a", "grep -rn load_settings src/")) == ("load_settings",)
    assert message_names(_result("a", "src/a.py: def load_settings(): dump_everything_here")) == ()
    assert message_names(Message("system", ({"type": "text", "text": "use snake_case_names"},))) == ()


def test_recurring_names_are_listed_most_used_first_within_the_share() -> None:
    with Store(":memory:") as store:
        store.append(
            [
                _user("Rename fetch_rows to load_rows in StoreReader."),
                _assistant("I'll rename fetch_rows; StoreReader calls fetch_rows twice."),
                _call("a", "grep -rn fetch_rows src/"),
                _result("a", "src/reader.py: fetch_rows( once_only_name"),
                _assistant("Done: load_rows replaces fetch_rows; StoreReader updated. once_seen_name"),
            ]
        )
        text = names_text(store, 5, share_tokens=60, encoding=ENC)
        assert text == f"{NAMES_INTRO}\nfetch_rows StoreReader load_rows"
        assert count_text(text, ENC) <= 60
        assert names_text(store, 1, share_tokens=60, encoding=ENC) is None  # nothing recurs yet
        assert names_text(store, 5, share_tokens=5, encoding=ENC) is None  # not even one name fits
        # below the floor a small budget keeps its tokens for the history, though names would fit
        assert names_text(store, 5, share_tokens=MIN_SHARE_TOKENS, encoding=ENC) == text
        assert names_text(store, 5, share_tokens=MIN_SHARE_TOKENS - 1, encoding=ENC) is None


def test_the_ledger_block_carries_the_names_after_the_asks_without_repeating_theirs() -> None:
    with Store(":memory:") as store:
        store.append(
            [
                _user("Port parse_config to the new API."),
                _assistant("I'll port parse_config with load_schema now."),
                _assistant("load_schema reads parse_config's output."),
            ]
        )
        text = ledger_for(store, 3, cap=600, share_tokens=400, encoding=ENC)
        assert text is not None
        assert text.startswith(LEDGER_INTRO)
        assert text.endswith(f"{NAMES_INTRO}\nload_schema")  # parse_config is in the ask above
        assert text.count("parse_config") == 1
        assert names_text(store, 3, share_tokens=100, encoding=ENC) == f"{NAMES_INTRO}\nparse_config load_schema"


def test_a_url_is_listed_whole_up_to_its_own_limit() -> None:
    wheel = "https://files.example.org/packages/62/c0/" + "8" * 64 + "/transformers-4.44.0-py3-none-any.whl"
    huge = "https://example.org/download?" + "&".join(f"k{i}=v{i}" for i in range(60))
    snake = "a_" + "b" * (MAX_NAME_CHARS - 1)  # one character over the limit of other names
    assert MAX_NAME_CHARS < len(wheel) <= MAX_URL_CHARS < len(huge)
    said = f"Get {wheel} and {huge}, then call {snake}."
    assert message_names(_assistant(said)) == (wheel,)
    with Store(":memory:") as store:
        store.append([_assistant(said), _user(f"Retry {wheel} please"), _assistant("ok")])
        assert names_text(store, 3, share_tokens=200, encoding=ENC) == f"{NAMES_INTRO}\n{wheel}"


_NAMES = st.sampled_from(
    ["fetch_rows", "StoreReader", "load_rows", "parseConfig", "MAX_RETRIES", "make_store"]
)
_messages = st.lists(
    st.tuples(st.sampled_from(["user", "assistant"]), st.lists(_NAMES, max_size=4)).map(
        lambda pair: (_user if pair[0] == "user" else _assistant)(" and ".join(pair[1]) or "ok")
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_messages, st.lists(st.integers(0, 30), min_size=1, max_size=8))
def test_counts_at_any_cut_equal_a_fresh_count(messages: list[Message], cuts: list[int]) -> None:
    with Store(":memory:") as store:
        store.append(messages)
        for cut in cuts:
            expected = Counter(name for m in messages[:cut] for name in message_names(m))
            assert names_before(store, cut) == expected


def test_only_the_newest_window_of_messages_before_the_cut_is_read(monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(names_index, "WINDOW", 3)
    with Store(":memory:") as store:
        store.append(
            [_assistant("old_name_one and old_name_one")] * 3 + [_assistant("new_name_two here")] * 3
        )
        assert names_before(store, 6) == Counter({"new_name_two": 3})
        assert names_before(store, 4) == Counter({"old_name_one": 2, "new_name_two": 1})
        assert names_text(store, 6, share_tokens=60, encoding=ENC) == f"{NAMES_INTRO}\nnew_name_two"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_messages, _messages, st.integers(0, 30))
def test_the_index_of_a_cut_is_byte_stable_as_messages_are_appended(
    older: list[Message], newer: list[Message], cut: int
) -> None:
    cut = min(cut, len(older))
    with Store(":memory:") as store:
        store.append(older)
        before = names_text(store, cut, share_tokens=200, encoding=ENC)
        store.append(newer)
        assert names_text(store, cut, share_tokens=200, encoding=ENC) == before
    with Store(":memory:") as fresh:  # another process reading the same history: the same bytes
        fresh.append(older + newer)
        assert names_text(fresh, cut, share_tokens=200, encoding=ENC) == before


def test_a_compiled_request_names_what_its_summaries_cover() -> None:
    history: list[Message] = []
    for i in range(40):
        history.append(
            _user(f"Step {i}: refactor the next loader and keep the reader working. " + "x " * 150)
        )  # the asks name nothing: the names are the assistant's
        history.append(_assistant(f"I'll refactor load_rows_{i % 4}; StoreReader stays. " + "y " * 150))
    with Store(":memory:") as store:
        store.append(history)
        compiled, _ticks = compress_and_compile(store, Recipe(budget_tokens=3000), mode="replan")
        assert compiled.summaries  # the older turns are summarized
        shown = compiled.request.payload.decode()
        assert NAMES_INTRO in shown and "StoreReader" in shown
        assert compiled.tokens <= 3000
