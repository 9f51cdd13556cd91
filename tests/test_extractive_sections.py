"""The offline summary's sections, read on constructed histories: what each holds, and what it must not.

Each test builds the request the compactor builds (the L1 instruction names the range, the
merge request carries ``[Record of …]`` blocks), gates it, and reads the record the
extractive summarizer writes.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compaction.blocks import Block, Message
from compaction.compactor import Compactor, compression_image_settings
from compaction.recipe import Recipe
from compaction.store import Store
from compaction.summarizers import ExtractiveSummarizer
from compaction.summarizers._record import (
    ErrorItem,
    Record,
    merge_records,
    parse_record,
    range_label,
    render,
)
from compaction.summarizers.base import SUMMARY_HEADINGS, l1_system_prompt, merge_system_prompt
from compaction.tokens.counting import count_text
from compaction.wire import OutboundRequest, gate

ENCODING = "o200k_base"


def text(role: str, body: str) -> tuple[str, tuple[Block, ...]]:
    return role, ({"type": "text", "text": body},)


def call(call_id: str, name: str, **tool_input: Any) -> tuple[str, tuple[Block, ...]]:
    return "assistant", ({"type": "tool_use", "id": call_id, "name": name, "input": tool_input},)


def result(call_id: str, content: str, is_error: bool = False) -> tuple[str, tuple[Block, ...]]:
    block: Block = {"type": "tool_result", "tool_use_id": call_id, "content": content}
    if is_error:
        block["is_error"] = True
    return "user", (block,)


def l1(messages: Sequence[tuple[str, tuple[Block, ...]]], start: int = 0, max_tokens: int = 600) -> str:
    """Summarize ``messages`` (message ``start`` first) the way the compactor asks for an L1."""
    end = start + len(messages) - 1
    ask: tuple[Block, ...] = (
        {"type": "text", "text": f"Write the state record of the conversation above (messages {start}–{end})."},
        # room: a record may take a quarter of the request's material, and these histories are short
        {"type": "text", "text": FILLER},
    )
    request = OutboundRequest("l1", l1_system_prompt(max_tokens), (*messages, ("user", ask)))
    gated = gate(request, compression_image_settings(Recipe()), format="openai", model="gpt-4o",
                 max_output_tokens=max_tokens)
    return ExtractiveSummarizer().summarize(gated, kind="l1").text


def merged(texts: Sequence[str], max_tokens: int = 400, summarizer: ExtractiveSummarizer | None = None) -> str:
    # (the filler in the first block gives the record room: a merge may take half of its material)
    blocks: list[Block] = [{"type": "text", "text": f"Merge these {len(texts)} consecutive records into one.\n{FILLER}"}]
    blocks += [{"type": "text", "text": f"[Record of part {i + 1}]\n{t}"} for i, t in enumerate(texts)]
    request = OutboundRequest("merge", merge_system_prompt(max_tokens), (("user", tuple(blocks)),))
    gated = gate(request, compression_image_settings(Recipe()), format="openai", model="gpt-4o",
                 max_output_tokens=max_tokens)
    return (summarizer or ExtractiveSummarizer()).summarize(gated, kind="merge").text


def section(record: str, heading: str) -> list[str]:
    """Return the ``- `` items under ``heading`` (empty when the section is absent)."""
    lines = record.splitlines()
    if f"{heading}:" not in lines:
        return []
    out = []
    for line in lines[lines.index(f"{heading}:") + 1 :]:
        if not line.startswith("- "):
            break
        out.append(line[2:])
    return out


#: File content that makes the material long enough for a full record (a record gets at most a quarter of it).
FILLER = "".join(f"    value_{i} = compute_{i}(value_{i - 1})\n" for i in range(300))

SESSION = [
    text("user", "Add retry logic to the fetcher in src/fetch.py and make the tests pass, please."),
    ("assistant", (
        {"type": "text", "text": "I'll read the fetcher first to see how it calls get."},
        {"type": "tool_use", "id": "c1", "name": "Read", "input": {"file_path": "/repo/src/fetch.py"}},
    )),
    result("c1", 'def fetch(url):\n    # log "failed attempts" and give up\n    return get(url)\n' + FILLER),
    call("c2", "Edit", file_path="/repo/src/fetch.py", old_string="x", new_string="y"),
    result("c2", "String to replace not found in file.", is_error=True),
    call("c3", "Edit", file_path="/repo/src/fetch.py", old_string="return get(url)", new_string="return retry(get, url)"),
    result("c3", "The file /repo/src/fetch.py has been updated."),
    call("c4", "Bash", command="cd /repo && python -m pytest tests/test_fetch.py -q"),
    result("c4", "F.\nE   AssertionError: expected 3 retries\n1 failed, 1 passed in 0.12s\nexit code 1"),
    call("c5", "Bash", command="node --test tests/", description="tap run"),
    result("c5", "# tests 4\n# pass 4\n# fail 0"),
    call("c6", "Bash", command="rm /repo/src/old_fetch.py"),
    result("c6", ""),
    call("c7", "Write", file_path="/repo/src/retry.py", content='def retry(f, *a):\n    """Retry \\"f\\"."""\n'),
    result("c7", "File created successfully at: /repo/src/retry.py"),
    ("assistant", (
        {"type": "text", "text": "I'll keep the retry count configurable because the tests expect 3."},
        {"type": "tool_use", "id": "c8", "name": "TodoWrite", "input": {"todos": [
            {"content": "Add retry helper", "status": "completed"},
            {"content": "Make test_fetch pass", "status": "in_progress"},
        ]}},
    )),
    result("c8", "Todos have been modified successfully."),
    text("assistant", "The retry helper is in place. Should the retry count come from the config file?"),
]


def test_an_l1_record_has_every_section_with_real_values() -> None:
    record = l1(SESSION, start=40)
    assert [line[:-1] for line in record.splitlines() if line.endswith(":") and not line.startswith("-")] == list(
        SUMMARY_HEADINGS
    )
    assert section(record, "Goal") == ["Add retry logic to the fetcher in src/fetch.py and make the tests pass, please."]
    assert section(record, "Asks") == [
        "message 40: Add retry logic to the fetcher in src/fetch.py and make the tests pass, please."
    ]
    errors = section(record, "Errors")
    assert errors == [
        "[resolved] edit `/repo/src/fetch.py`, message 44: String to replace not found in file.",
        "[open] run `python -m pytest tests/test_fetch.py -q`, message 48: E AssertionError: expected 3 retries"
        " ⟩ 1 failed, 1 passed in 0.12s ⟩ exit code 1",
    ]
    files = dict(line.split(" — ") for line in section(record, "Files"))
    assert files == {
        "/repo/src/fetch.py": "read, edited",
        "/repo/src/old_fetch.py": "deleted",
        "/repo/src/retry.py": "wrote",
    }
    done = section(record, "Done")
    assert "ran `node --test tests/` → ok (3 lines): # fail 0" in done
    assert "ran `python -m pytest tests/test_fetch.py -q` → failed (exit 1)" in done
    assert "completed: Add retry helper" in done
    assert section(record, "Decisions") == [
        "I'll read the fetcher first to see how it calls get.",
        "I'll keep the retry count configurable because the tests expect 3.",
    ]
    opened = section(record, "Open threads")
    assert "todo (in progress): Make test_fetch pass" in opened
    assert "question to the user (message 57): Should the retry count come from the config file?" in opened
    assert not any(line.startswith("next:") for line in opened)  # the newest text states no plan
    assert "failing: run `python -m pytest tests/test_fetch.py -q`, message 48" in opened
    # no escaped JSON anywhere, and a passing run or a source line is no error
    assert "\\n" not in record and '\\"' not in record
    assert not any("fail 0" in e or "failed attempts" in e for e in errors)


def test_the_newest_text_s_plan_is_the_next_step() -> None:
    record = l1([*SESSION, text("assistant", "Next, I'll wire the retry count into config.toml.")], start=40)
    assert section(record, "Open threads")[-2:] == [
        "next: Next, I'll wire the retry count into config.toml.",
        "failing: run `python -m pytest tests/test_fetch.py -q`, message 48",
    ]
    assert "Next, I'll wire the retry count into config.toml." not in section(record, "Decisions")


def test_escaped_output_reads_plain() -> None:
    record = l1([
        call("a", "str_replace_editor", command="str_replace", path="/w/cli.pony", old_str="x"),
        result("a", r"ERROR: No replacement was performed, old_str 'return a.\n  b(\"c\")' did not appear"),
    ])
    (error,) = section(record, "Errors")
    assert error == "[open] edit `/w/cli.pony`, message 1: ERROR: No replacement was performed, old_str 'return a. b(\"c\")' did not appear"


def test_a_later_success_of_the_same_command_resolves_its_error() -> None:
    record = l1([
        call("a", "bash", command="npm run check"),
        result("a", "src/x.ts(3,1): error TS2304: Cannot find name 'y'.\nexited with code 2"),
        call("b", "bash", command="cd /repo && npm run check"),
        result("b", "All checks passed"),
    ])
    assert section(record, "Errors") == [
        "[resolved] run `npm run check`, message 1: src/x.ts(3,1): error TS2304: Cannot find name 'y'. ⟩ exited with code 2"
    ]
    assert section(record, "Open threads") == []


def test_a_search_that_found_nothing_and_a_read_of_source_mentioning_errors_are_no_errors() -> None:
    record = l1([
        text("user", "Find where the lockout is configured in the auth module."),
        call("a", "bash", command="grep -rn lockout src/"),
        result("a", "exit code 1"),
        call("b", "read_file", path="src/auth.py"),
        result("b", "MAX = 5\n# 5 failed attempts -> 15 min lockout\nraise ValueError('locked')\nError: not here"),
    ])
    assert section(record, "Errors") == []
    assert "src/auth.py — read" in section(record, "Files")


def test_a_single_message_is_named_message_n() -> None:
    assert range_label(961, 961) == "Message 961"
    assert range_label(3, 9) == "Messages 3–9"
    record = l1([text("user", "Rename the frobnicator module to widget everywhere in the repository.")], start=961)
    assert section(record, "Asks") == ["message 961: Rename the frobnicator module to widget everywhere in the repository."]
    assert "961–961" not in record


def test_asks_are_brief_references() -> None:
    long_ask = " ".join(f"word{i}" for i in range(60))
    (ask,) = section(l1([text("user", long_ask), text("assistant", "On it.")], start=7), "Asks")
    assert ask == "message 7: " + " ".join(f"word{i}" for i in range(15)) + "…"


def test_message_numbers_count_from_the_chunk_start_in_a_real_compaction() -> None:
    history = [Message("system", ({"type": "text", "text": "You are terse."},))]
    for i in range(12):
        history.append(Message("user", ({"type": "text", "text": f"Please rename helper_{i} to util_{i} in lib_{i}.py"},)))
        history.append(Message("assistant", ({"type": "text", "text": f"Renamed helper_{i}."},)))
    with Store(":memory:") as store:
        store.append(history)
        Compactor(store, Recipe(chunk_target_tokens=60, chunk_min_messages=2)).tick(keep_tail_tokens=0)
        summaries = store.summaries(level=1)
        assert summaries
        for summary in summaries:
            for ask in section(summary.text, "Asks"):
                seq = int(re.match(r"message (\d+): ", ask).group(1))  # type: ignore[union-attr]
                assert summary.start_seq <= seq < summary.end_seq
                assert store.messages(seq, seq + 1)[0].text().startswith(ask.split(": ", 1)[1].rstrip("…"))


def test_a_newer_record_resolves_an_older_open_error_and_open_threads_come_from_the_newest() -> None:
    older = l1(SESSION, start=40)
    newer = l1([
        call("d1", "Bash", command="python -m pytest tests/test_fetch.py -q"),
        result("d1", "2 passed in 0.10s"),
        text("assistant", "All tests pass now."),
    ], start=60)
    record = merged([older, newer])
    errors = section(record, "Errors")
    assert (
        "[resolved] run `python -m pytest tests/test_fetch.py -q`, message 48: E AssertionError: expected 3 retries"
        " ⟩ 1 failed, 1 passed in 0.12s ⟩ exit code 1"
    ) in errors
    assert not any(e.startswith("[open]") for e in errors)
    assert not any(line.startswith("failing:") for line in section(record, "Open threads"))
    assert section(record, "Goal") == section(older, "Goal")
    # and the other way round: open in the newest record stays open
    assert any(e.startswith("[open] run `python -m pytest") for e in section(merged([newer, older]), "Errors"))


def test_merging_dedupes_files_under_two_spellings() -> None:
    a = Record(files={"src/a.py": Counter({"read": 1})})
    b = Record(files={"/repo/src/a.py": Counter({"edited": 2})})
    record = merge_records([a, b])
    assert list(record.files) == ["/repo/src/a.py"] and dict(record.files["/repo/src/a.py"]) == {"read": 1, "edited": 2}


def _child(index: int) -> str:
    return l1([
        text("user", f"Step {index}: port module_{index} to the new store API and keep its tests green."),
        call(f"r{index}", "Read", file_path=f"/repo/src/module_{index}.py"),
        result(f"r{index}", "def f():\n    pass\n"),
        call(f"e{index}", "Edit", file_path=f"/repo/src/module_{index}.py", old_string="a", new_string="b"),
        result(f"e{index}", "Error: old_string not found", is_error=index % 2 == 0),
        call(f"t{index}", "Bash", command=f"pytest tests/test_module_{index}.py"),
        result(f"t{index}", f"{index} passed in 0.1s"),
        text("assistant", f"I'll move module_{index} behind the adapter next, since the old API goes away."),
    ], start=index * 8, max_tokens=300)


def test_merges_stay_bounded_over_three_levels_of_six() -> None:
    bound = 300
    level = [_child(i) for i in range(6**3)]
    for _depth in range(3):
        level = [merged(level[i : i + 6], bound) for i in range(0, len(level), 6)]
        assert all(count_text(t, ENCODING) <= bound for t in level)
    (top,) = level
    assert section(top, "Goal") == [section(_child(0), "Goal")[0]]
    asks = section(top, "Asks")
    counted = re.search(r"(?:^- … (\d+) more left out$)", "\n".join(asks[-1:]))
    shown = [a for a in asks if a.startswith("message ")]
    left = int(counted.group(1)) if counted else int(re.search(r"Asks (\d+)", top).group(1))  # type: ignore[union-attr]
    assert len(shown) + left == 216  # every ask is shown or counted as left out


def test_the_summary_is_deterministic() -> None:
    assert l1(SESSION) == l1(SESSION)
    assert merged([_child(1), _child(2)]) == merged([_child(1), _child(2)])


def test_a_focus_keeps_its_lines_when_lines_must_go() -> None:
    children = [_child(i) for i in range(6)]
    plain = merged(children, 140)
    focused = merged(children, 140, ExtractiveSummarizer(focus="keep everything about module_3 and its adapter"))
    assert count_text(focused, ENCODING) <= 140
    def kept_lines(record: str) -> list[str]:  # lines with their section, not the Also-touched names
        return [line for line in record.splitlines() if "module_3" in line and not line.startswith("Also touched")]

    assert kept_lines(focused) and not kept_lines(plain)


# -- properties ----------------------------------------------------------------------------------

_words = st.text(alphabet="abcdefghij klmnop/._-", min_size=1, max_size=40).map(lambda s: " ".join(s.split()) or "x")
_errors = st.builds(
    ErrorItem,
    status=st.sampled_from(["open", "resolved"]),
    verb=st.sampled_from(["run", "edit", "read"]),
    subject=_words.map(lambda s: s.replace("`", "")),
    seq=st.integers(0, 5000),
    text=_words,
)
_records = st.builds(
    Record,
    goal=_words,
    asks=st.dictionaries(st.integers(0, 5000), _words, max_size=8),
    done=st.lists(_words, max_size=8),
    errors=st.lists(_errors, max_size=6),
    decisions=st.lists(_words, max_size=6),
    open=st.lists(_words, max_size=4),
    names=st.dictionaries(st.from_regex(r"[a-z]{2,6}_[a-z0-9]{1,6}|[a-z]{2,5}[A-Z][a-z]{1,5}", fullmatch=True),
                          st.integers(1, 40), max_size=40).map(Counter),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_records, min_size=1, max_size=6), st.integers(32, 300))
def test_any_merge_renders_within_its_bound_and_reads_back(records: list[Record], bound: int) -> None:
    texts = [render(r, 10_000, ENCODING) for r in records]
    combined = merge_records([parse_record(t) for t in texts])
    out = render(combined, bound, ENCODING)
    assert count_text(out, ENCODING) <= bound
    assert out.strip()
    again = parse_record(out)
    assert set(again.names) <= set(combined.names)  # names shown are the most frequent, counts kept
    assert all(again.names[n] == combined.names[n] for n in again.names)
    ranked = [n for n, _count in combined.ranked_names()]
    assert ranked[: len(again.names)] == list(again.names)
    for error in again.errors:  # an error shown keeps a status merged from its records
        assert error.status in ("open", "resolved")
    assert render(again, bound, ENCODING) == render(parse_record(out), bound, ENCODING)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(["ok", "fail"]), min_size=1, max_size=6))
def test_the_newest_run_decides_whether_an_error_is_open(outcomes: list[str]) -> None:
    messages: list[tuple[str, tuple[Block, ...]]] = [text("user", "Make the build green in the monorepo.")]
    for i, outcome in enumerate(outcomes):
        messages.append(call(f"c{i}", "bash", command="make build"))
        messages.append(result(f"c{i}", "built" if outcome == "ok" else f"Error: missing symbol sym_{i}\nexit code 2"))
    errors = section(l1(messages), "Errors")
    failed = [i for i, o in enumerate(outcomes) if o == "fail"]
    assert len(errors) == len(failed)
    for i, line in zip(failed, errors, strict=True):
        later_ok = "ok" in outcomes[i + 1 :]
        assert line.startswith("[resolved]" if later_ok else "[open]"), (outcomes, line)
        assert f"sym_{i}" in line


def test_split_parts_read_calls_back_without_json_escapes() -> None:
    from compaction.splitting import flatten

    message = Message("assistant", ({"type": "tool_use", "id": "w1", "name": "write",
                                     "input": {"path": "docs/plan.md", "content": 'line "one"\nline two\n' * 50}},))
    answer = Message("user", ({"type": "tool_result", "tool_use_id": "w1", "content": "Wrote docs/plan.md"},))
    pieces = flatten(message) + flatten(answer)
    header: Block = {"type": "text", "text": "Part 1 of 2 of messages 19–20 of the history (one tool round too large to send whole):"}
    request = OutboundRequest("split", l1_system_prompt(200), (("user", (header, *pieces)), text("user", "Write the state record of this part.")))
    gated = gate(request, compression_image_settings(Recipe()), format="openai", model="gpt-4o", max_output_tokens=200)
    record = ExtractiveSummarizer().summarize(gated, kind="split").text
    assert section(record, "Files") == ["docs/plan.md — wrote"]
    assert "\\n" not in record and '\\"' not in record and json.dumps("x")[0] not in section(record, "Files")[0]
