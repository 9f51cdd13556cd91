"""``compaction count --store`` against ``compaction run``'s *tokens before* (session 16).

``count --store`` counts each message's text as ``compaction show`` prints it
(:func:`compaction.inspect.message_text`: thinking included, tool calls and results labelled,
no framing); ``run`` prices the whole history as one OpenAI Chat request
(:func:`compaction.compile.raw_history_tokens`: thinking dropped, every message framed, the
reply primed).  On a history of plain text turns the two differ by exactly the frames:
``run = count + MESSAGE_OVERHEAD * messages + REQUEST_OVERHEAD``.
"""

from __future__ import annotations

import json
from pathlib import Path

from cli_runner import cli
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction import Recipe, Store
from compaction.blocks import Message
from compaction.cli import STORE_COUNT_NOTE
from compaction.compile import raw_history_tokens
from compaction.fleet.counting import count_store_messages
from compaction.tokens.counting import MESSAGE_OVERHEAD, REQUEST_OVERHEAD, count_text

# words and punctuation, never blank, no edge whitespace (a final turn's trailing blanks are
# what Anthropic strips; this is OpenAI Chat, but keep the texts plain)
WORDS = (
    st.text(alphabet="abcdefghij KLMNOP.,;:!?0123456789éü中文", min_size=1, max_size=60)
    .map(str.strip)
    .filter(bool)
)


def _store_of(path: Path, turns: list[list[dict[str, object]]]) -> None:
    with Store(path) as store:
        store.append(
            [Message(role=("user", "assistant")[i % 2], content=tuple(t)) for i, t in enumerate(turns)]
        )


@settings(max_examples=30)
@given(texts=st.lists(WORDS, min_size=1, max_size=8))
def test_plain_turns_differ_by_the_frames_alone(tmp_path_factory, texts: list[str]) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path_factory.mktemp("plain") / "s.sqlite"
    _store_of(path, [[{"type": "text", "text": t}] for t in texts])
    counted = count_store_messages(str(path), "o200k_base", "fast")
    with Store(path) as store:
        before = raw_history_tokens(store, Recipe())
    assert counted.tokens == sum(count_text(t, "o200k_base") for t in texts)
    assert before == counted.tokens + MESSAGE_OVERHEAD * len(texts) + REQUEST_OVERHEAD


def test_thinking_counts_in_count_store_and_not_in_run(tmp_path: Path) -> None:
    plain = [
        [{"type": "text", "text": "Fix the CSV export."}],
        [{"type": "text", "text": "Done: rows kept."}],
    ]
    thought = [
        plain[0],
        [{"type": "thinking", "thinking": "The loop skips the last row.", "signature": "c2ln"}, *plain[1]],
    ]
    _store_of(tmp_path / "plain.sqlite", plain)
    _store_of(tmp_path / "thought.sqlite", thought)
    counts = [
        count_store_messages(str(tmp_path / n), "o200k_base", "fast").tokens
        for n in ("plain.sqlite", "thought.sqlite")
    ]
    befores = []
    for name in ("plain.sqlite", "thought.sqlite"):
        with Store(tmp_path / name) as store:
            befores.append(raw_history_tokens(store, Recipe()))
    # run: OpenAI Chat drops the thinking block, so the request is the same size
    assert befores[0] == befores[1] == counts[0] + 2 * MESSAGE_OVERHEAD + REQUEST_OVERHEAD
    # count --store: the thinking line "[thinking] ...", then a line break, before the answer
    thinking_line = "[thinking] The loop skips the last row.\nDone: rows kept."
    assert counts[1] - counts[0] == count_text(thinking_line, "o200k_base") - count_text(
        "Done: rows kept.", "o200k_base"
    )
    assert counts[1] > counts[0]


def test_the_commands_say_what_they_count_and_the_figures_relate(tmp_path: Path) -> None:
    transcript = tmp_path / "chat.json"
    messages = [
        {"role": "user", "content": "Why does the export drop rows?"},
        {"role": "assistant", "content": "The loop stops one short."},
        {"role": "user", "content": "Fix it."},
    ]
    transcript.write_text(json.dumps(messages), "utf-8")
    db = tmp_path / "s.sqlite"
    ran = cli("run", transcript, "--budget", "4000", "--store", db, "--json")
    assert ran.exit_code == 0, ran.output
    before = json.loads(ran.stdout)["tokens_before"]
    counted = cli("count", "--store", db)
    assert counted.exit_code == 0, counted.output
    total = sum(count_text(m["content"], "o200k_base") for m in messages)
    assert counted.stdout.splitlines() == [f"{total:>10}  tokens of 3 messages' text", STORE_COUNT_NOTE]
    assert "thinking included" in STORE_COUNT_NOTE and "no message or request framing" in STORE_COUNT_NOTE
    assert before == total + 3 * MESSAGE_OVERHEAD + REQUEST_OVERHEAD == total + 15
    table = cli("run", transcript, "--budget", "4000")
    assert table.exit_code == 0, table.output
    squeezed = "".join(table.stdout.replace("│", " ").split())  # the table may wrap the value
    assert f"{before}(thewholehistoryasoneopenairequest)" in squeezed
