"""``HistoryStore.prompt_texts``: the ask ledger's one-query read of the user turns.

It must give exactly what reading each turn whole gives (:func:`compaction.asks.ask_text` on
``store.messages(seq, seq + 1)``), on every backend, for real transcripts and generated
histories, with edited turns showing their newest revision.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import EXAMPLES
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from store_backends import every_backend_store  # noqa: F401  (the store fixture over every backend)

from compaction import Message, Store, StoreError
from compaction.asks import ask_from_texts, ask_text
from compaction.ledger import asks_before
from compaction.pipeline import import_transcript

TRANSCRIPTS = sorted(p for p in EXAMPLES.iterdir() if p.is_file() and p.name != "README.md")


def _slow_asks(store: object, end: int) -> list[tuple[int, str]]:
    """The asks as read one whole message at a time (the reference)."""
    found = []
    for seq in store.prompt_seqs(0, end):  # type: ignore[attr-defined]
        text = ask_text(store.messages(seq, seq + 1)[0])  # type: ignore[attr-defined]
        if text:
            found.append((seq, text))
    return found


def _fast_asks(store: object, end: int) -> list[tuple[int, str]]:
    found = []
    for turn in store.prompt_texts(0, end):  # type: ignore[attr-defined]
        text = ask_from_texts("\n".join(turn.texts), turn.kind)
        if text:
            found.append((turn.seq, text))
    return found


@pytest.mark.parametrize("path", TRANSCRIPTS, ids=lambda p: p.name[:40])
def test_prompt_texts_give_the_asks_whole_messages_give_on_real_transcripts(path: Path) -> None:
    with Store(":memory:") as store:
        import_transcript(store, path, lenient=True)
        end = store.next_seq()
        assert [t.seq for t in store.prompt_texts(0, end)] == store.prompt_seqs(0, end)
        fast = _fast_asks(store, end)
        assert fast == _slow_asks(store, end)
        if "pi__" in path.name:
            assert len(fast) >= 40  # the pi session's real asks are all read
        cached = [(a.seq, a.text) for a in asks_before(store, end)]
        assert {seq for seq, _ in cached} <= {seq for seq, _ in fast}


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
_BLOCK = st.one_of(
    _TEXT.map(lambda t: {"type": "text", "text": t}),
    st.just({"type": "tool_result", "tool_use_id": "t1", "content": "ok"}),
)


@settings(max_examples=40, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    turns=st.lists(
        st.tuples(
            st.sampled_from(["user", "assistant"]),
            st.lists(_TEXT.map(lambda t: {"type": "text", "text": t or "x"}), min_size=1, max_size=3),
            st.sampled_from([None, "bash_execution", "branch_summary"]),
        ),
        min_size=1,
        max_size=12,
    ),
    edit=st.integers(0, 11),
)
def test_prompt_texts_agree_with_whole_messages_on_every_backend(store, turns, edit) -> None:  # type: ignore[no-untyped-def]
    start = store.next_seq()
    messages = [
        Message(role, tuple(blocks), meta={} if kind is None else {"kind": kind}) for role, blocks, kind in turns
    ]
    store.append(messages)
    end = store.next_seq()
    seq = start + edit % len(messages)
    if store.messages(seq, seq + 1)[0].role == "user":
        store.edit(seq, ({"type": "text", "text": f"edited turn {seq}"},))
    assert [t.seq for t in store.prompt_texts(start, end)] == store.prompt_seqs(start, end)
    assert _fast_asks(store, end) == _slow_asks(store, end)


def test_a_damaged_user_row_is_one_store_error(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    with Store(path) as store:
        store.append([Message("user", ({"type": "text", "text": "fix the parser"},))])
        store._db.execute("UPDATE messages SET content = '{not json' WHERE seq = 0")  # noqa: SLF001
        with pytest.raises(StoreError, match="message 0: the stored row is damaged"):
            store.prompt_texts()
