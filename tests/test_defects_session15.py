"""Small known defects closed in session 15, each pinned by a test that failed before its fix.

1. A JSON transcript cut short (or broken in the middle) was reported as an unknown format when
   its format was detected: the damage is now named (file, line, column, cut short) with the
   format the part before it reads as.
2. ``run --lenient`` said how many lines it skipped, not which: it now lists the first five
   (``path:line: what``) and how many more, and ``--json`` gives them all as ``problems``.
3. A store of system messages only compiled for OpenAI Responses gives ``instructions`` and
   ``input: []``: OpenAI's OpenAPI description allows it, so the shape is pinned, not refused.
4. ``prefill.final_turn`` read a store's trailing system messages one query each: it now finds
   the run from the pinned seqs and reads it in doubling windows (log2 of the run in queries).
5. ``inspect`` and ``replay`` passed a blank ``--model`` to the recipe ("<replace>: key 'model'",
   exit 1): it is now the usage error run and compile give (exit 2, naming the option).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from cli_runner import cli
from click.testing import Result
from hypothesis import example, given, settings
from hypothesis import strategies as st
from lenient_checks import assert_listed, jsonl_with_bad_lines

from compaction import Message, Recipe, Store, compile_request
from compaction.errors import InvalidTranscript, StoreError, UnknownFormat
from compaction.formats import load_transcript
from compaction.formats._json_damage import cut_short, describe, repaired_prefix
from compaction.prefill import final_turn

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
CASES = ROOT / "tests" / "data" / "cases"
FORMAT_DATA = ROOT / "tests" / "data" / "formats"

#: Every real transcript of the repository that is one JSON document, with its format.
JSON_DOCUMENTS: list[tuple[str, Path]] = [
    ("agent-tars", EXAMPLES / "agent-tars__browser__event-stream-with-many-images.json"),
    ("swe-agent", EXAMPLES / "swe-agent__marshmallow-1867__function-calling.traj"),
    ("trajectory", FORMAT_DATA / "trajectory__subagent-tool-calls.json"),
    ("inspect-ai", FORMAT_DATA / "inspect-ai__log_images.json"),
    ("inspect-ai", FORMAT_DATA / "inspect-ai__browser.json"),
    ("openai-responses", FORMAT_DATA / "openai-responses__agent-input-items.json"),
    ("langchain", FORMAT_DATA / "langchain__messages_to_dict.json"),
    ("langchain", FORMAT_DATA / "langgraph__state_dumpd.json"),
    ("cline", FORMAT_DATA / "cline__api_conversation_history.json"),
    ("anthropic", CASES / "parallel-tool-fanout.json"),
    ("anthropic", CASES / "tool-pair-in-the-middle.json"),
]


def one_error_line(result: Result) -> str:
    """Assert a user error (exit 1, one stderr line, no traceback) and return that line."""
    assert result.exit_code == 1, (result.exit_code, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr + result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("compaction: error: ")
    return lines[0]


def cut_in_half(path: Path, into: Path) -> Path:
    data = path.read_bytes()
    into.write_bytes(data[: len(data) // 2])
    return into


# -- 1. a JSON transcript cut short -----------------------------------------------------------------


@pytest.mark.parametrize(("name", "path"), JSON_DOCUMENTS, ids=lambda v: v.name if isinstance(v, Path) else v)
def test_a_json_transcript_cut_in_half_is_named_damaged_not_unknown(
    name: str, path: Path, tmp_path: Path
) -> None:
    """Before: inspect-ai, langchain, openai-responses, trajectory and anthropic samples cut in half
    said "cannot tell the transcript format (the content matches none of them)"."""
    cut = cut_in_half(path, tmp_path / path.name)
    text = cut.read_text("utf-8", errors="replace")
    try:
        json.loads(text)
    except json.JSONDecodeError as err:
        line = err.lineno
    for command in (["run", cut, "--budget", "16000"], ["import", cut, "--store", tmp_path / "s.db"]):
        said = one_error_line(cli(*command))
        assert f"{cut}:{line}: invalid JSON: " in said
        assert f"at line {line}, column " in said
        assert "(the file ends before its JSON does: cut short?)" in said
        assert "cannot tell the transcript format" not in said
        assert f"reads as {name!r}" in said or f"read as {name!r}" in said
    with pytest.raises(InvalidTranscript) as caught:
        load_transcript(cut)
    assert not isinstance(caught.value, UnknownFormat)


def test_a_json_document_broken_in_the_middle_names_where_and_is_not_called_cut_short(tmp_path: Path) -> None:
    data = json.loads((FORMAT_DATA / "openai-responses__agent-input-items.json").read_text("utf-8"))
    text = json.dumps(data, indent=1)
    lines = text.split("\n")
    broken = next(i for i, line in enumerate(lines) if i > len(lines) // 2 and line.rstrip().endswith(","))
    lines[broken] = lines[broken].rstrip()[:-1]  # a comma missing in the middle
    path = tmp_path / "items.json"
    path.write_text("\n".join(lines), "utf-8")
    with pytest.raises(InvalidTranscript) as caught:
        load_transcript(path)
    said = str(caught.value)
    assert not isinstance(caught.value, UnknownFormat)
    assert said.startswith(
        f"{path}:{broken + 2}: invalid JSON: Expecting ',' delimiter at line {broken + 2}, column "
    )
    assert "cut short" not in said and "reads as 'openai-responses'" in said


def test_jsonl_with_a_truncated_last_line_names_that_line_and_lenient_skips_it(tmp_path: Path) -> None:
    source = FORMAT_DATA / "craft-agents__session.jsonl"
    data = source.read_bytes().rstrip(b"\n")
    last = data.count(b"\n") + 1
    path = tmp_path / "session.jsonl"
    path.write_bytes(data[:-30])
    said = one_error_line(cli("run", path, "--budget", "16000"))
    assert f"{path}:{last}: invalid JSON: " in said and "--lenient" in said
    parsed = load_transcript(path, lenient=True)
    whole = load_transcript(source)
    assert parsed.skipped == 1 and parsed.problems[0].startswith(f"{path}:{last}: invalid JSON: ")
    assert len(parsed.messages) in (len(whole.messages) - 1, len(whole.messages))


def test_the_decoder_message_reads_as_english() -> None:
    """Before: "Unterminated string starting at at column 6" (the decoder's message ends in "at")."""
    with pytest.raises(json.JSONDecodeError) as caught:
        json.loads('[\n  "ab')
    assert describe(caught.value) == (
        "invalid JSON: Unterminated string starting at line 2, column 3 (the file ends before its JSON does: cut short?)"
    )
    assert describe(caught.value, unit="line") == "invalid JSON: Unterminated string starting at column 3"


# A JSON value whose text, cut anywhere, is a prefix of valid JSON.
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=25,
)


@settings(max_examples=300)
@given(
    value=JSON_VALUES.filter(lambda v: isinstance(v, (list, dict))),
    indent=st.sampled_from([None, 1]),
    data=st.data(),
)
def test_every_strict_prefix_of_a_document_is_cut_short_and_repairs_to_valid_json(
    value: list[object] | dict[str, object], indent: int | None, data: st.DataObject
) -> None:
    text = json.dumps(value, indent=indent)
    cut = data.draw(st.integers(1, len(text) - 1))
    prefix = text[:cut]
    with pytest.raises(json.JSONDecodeError) as caught:
        json.loads(prefix)
    assert cut_short(caught.value)
    assert "cut short?" in describe(caught.value)
    repaired = repaired_prefix(prefix, caught.value.pos)
    assert repaired is not None
    assert type(json.loads(repaired)) is type(value)
    assert prefix.startswith(repaired.rstrip("]}"))  # a cut-back prefix and closing brackets


MESSAGES = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["user", "assistant"]), "content": st.text(min_size=1, max_size=40)}
    ),
    min_size=2,
    max_size=6,
)


@settings(max_examples=60)
@given(messages=MESSAGES, wrapped=st.booleans(), data=st.data())
def test_a_chat_document_cut_anywhere_is_never_an_unknown_format(
    messages: list[dict[str, str]],
    wrapped: bool,
    data: st.DataObject,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    text = json.dumps({"messages": messages} if wrapped else messages, indent=1)
    cut = data.draw(st.integers(1, len(text) - 1))
    path = tmp_path_factory.mktemp("cut") / "chat.json"
    path.write_text(text[:cut], "utf-8")
    with pytest.raises(InvalidTranscript) as caught:
        load_transcript(path)
    assert not isinstance(caught.value, UnknownFormat)
    assert str(caught.value).startswith(f"{path}:")
    assert "cut short?" in str(caught.value)


# -- 2. run --lenient names the lines it skipped ------------------------------------------------------


@settings(max_examples=8)
@example(bad={3})
@example(bad={2, 4, 6, 8, 10, 12, 14})
@given(bad=st.sets(st.integers(2, 20), min_size=1, max_size=12))
def test_run_lenient_names_the_skipped_lines_at_most_five_then_how_many_more(
    bad: set[int], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Before: run --lenient said "(3 skipped)" in its table and never which lines."""
    path = jsonl_with_bad_lines(tmp_path_factory.mktemp("run") / "chat.jsonl", 20, bad)
    result = cli("run", path, "--budget", "16000", "--lenient")
    assert result.exit_code == 0, result.stderr
    assert all(line.startswith(("skipped ", "  ")) for line in result.stderr.strip().splitlines())
    assert_listed(result.stderr, path, bad, "run")
    report = json.loads(cli("run", path, "--budget", "16000", "--lenient", "--json").stdout)
    assert report["skipped"] == len(bad)
    assert [int(p.split(":")[1]) for p in report["problems"]] == sorted(bad)


def test_run_without_skipped_lines_prints_nothing_on_stderr(tmp_path: Path) -> None:
    path = jsonl_with_bad_lines(tmp_path / "chat.jsonl", 6, set())
    result = cli("run", path, "--budget", "16000", "--lenient")
    assert result.exit_code == 0 and result.stderr == ""


# -- 3. a store of system messages only, compiled for OpenAI ------------------------------------------

#: System texts as an agent writes them (no blank-only text, which a message may not hold).
SYSTEM_TEXTS = st.lists(
    st.text(st.characters(categories=["L", "N"]), min_size=1, max_size=40).map(lambda t: f"Rule: {t}."),
    min_size=1,
    max_size=5,
)


@settings(max_examples=40)
@given(texts=SYSTEM_TEXTS)
def test_a_system_only_store_compiles_for_openai_responses_to_instructions_and_an_empty_input(
    texts: list[str],
) -> None:
    """Pinned, not refused: OpenAI's OpenAPI description of ``POST /v1/responses``
    (github.com/openai/openai-openapi, openapi.yaml, ``CreateResponse``) requires no ``input``,
    and its item list (``InputParam``) sets no ``minItems`` (as ``context_management`` beside it
    does), while ``instructions`` "inserts a system (or developer) message" into the context; so
    ``instructions`` with ``input: []`` is a request the API describes, as Chat's
    ``messages: [system]`` is (Anthropic's ``messages: []`` is refused: test_system_only_store)."""
    with Store(":memory:") as store:
        store.append([Message("system", [{"type": "text", "text": t}]) for t in texts])
        responses = compile_request(store, Recipe(budget_tokens=4000, output_format="openai-responses"))
        chat = compile_request(store, Recipe(budget_tokens=4000, output_format="openai"))
    assert responses.request.body() == {"model": "gpt-4o", "instructions": "\n\n".join(texts), "input": []}
    assert chat.request.body() == {
        "model": "gpt-4o",
        "messages": [{"role": "system", "content": "\n\n".join(texts)}],
    }


# -- 4. prefill.final_turn reads a run of trailing system messages in a few queries --------------------


class CountingReads:
    """A store that counts its ``messages`` reads (the queries final_turn makes)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.reads: list[tuple[int, int]] = []

    def __len__(self) -> int:
        return len(self.store)

    def messages(self, start: int = 0, end: int | None = None) -> list[Message]:
        self.reads.append((start, len(self.store) if end is None else end))
        return self.store.messages(start, end)

    def pinned_seqs(self) -> list[int]:
        return self.store.pinned_seqs()


def newest_non_system(store: Store) -> tuple[str, int] | None:
    """The reference: every message read, the newest that is not a system one."""
    return next(
        ((m.role, seq) for seq, m in reversed(list(enumerate(store.messages()))) if m.role != "system"), None
    )


def text_message(role: str, text: str) -> Message:
    return Message(role, [{"type": "text", "text": text}])


@pytest.mark.parametrize("first", ["user", "assistant"])
def test_final_turn_after_thousands_of_system_messages_reads_them_in_a_few_queries(first: str) -> None:
    """Before: one query per trailing system message (20,000 took 1.5 s); now log2 of the run."""
    run = 3000
    with Store(":memory:") as store:
        store.append([text_message("user", "fix it"), text_message(first, "on it")])
        store.append([text_message("system", f"rule {i}") for i in range(run)])
        counting = CountingReads(store)
        assert final_turn(counting) == (first, 1)  # type: ignore[arg-type]
        assert len(counting.reads) <= math.ceil(math.log2(run)) + 3
        assert sum(end - start for start, end in counting.reads) <= run + 1  # each message read once
        store.pin(0)  # a pin before the run does not change the answer
        assert final_turn(store) == (first, 1)


@settings(max_examples=80)
@given(
    roles=st.lists(st.sampled_from(["user", "assistant", "system", "system"]), max_size=40),
    trailing=st.integers(0, 70),
    pins=st.sets(st.integers(0, 120), max_size=6),
)
def test_final_turn_is_the_newest_message_that_is_not_a_system_one(
    roles: list[str], trailing: int, pins: set[int]
) -> None:
    """Pinned user and assistant messages inside the trailing run of system messages included."""
    with Store(":memory:") as store:
        messages = [text_message(role, f"{role} {i}") for i, role in enumerate(roles)]
        messages += [text_message("system", f"rule {i}") for i in range(trailing)]
        if messages:
            store.append(messages)
        for seq in sorted(pins):
            if seq < len(messages) and messages[seq].role != "system":
                store.pin(seq)
        counting = CountingReads(store)
        assert final_turn(counting) == newest_non_system(store)  # type: ignore[arg-type]
        systems = (
            len(messages) - 1 - max((i for i, m in enumerate(messages) if m.role != "system"), default=-1)
        )
        assert len(counting.reads) <= math.ceil(math.log2(systems + 1)) + 3


def test_final_turn_finds_a_pinned_assistant_message_among_the_trailing_system_ones() -> None:
    with Store(":memory:") as store:
        store.append([text_message("user", "fix it"), text_message("assistant", "first")])
        store.append([text_message("system", f"rule {i}") for i in range(100)])
        store.append(
            [text_message("assistant", "pinned")] + [text_message("system", f"late {i}") for i in range(2000)]
        )
        assert final_turn(store) == ("assistant", 102)
        store.pin(102)  # now the whole tail is one run of pinned messages
        counting = CountingReads(store)
        assert final_turn(counting) == ("assistant", 102)  # type: ignore[arg-type]
        assert len(counting.reads) <= math.ceil(math.log2(2000 + 1)) + 3


# -- 5. inspect and replay refuse a blank --model as run and compile do -------------------------------


@pytest.fixture
def filled_store(tmp_path: Path) -> Path:
    store = tmp_path / "s.db"
    result = cli("import", FORMAT_DATA / "craft-agents__session.jsonl", "--store", store)
    assert result.exit_code == 0, result.stderr
    return store


@pytest.mark.parametrize("blank", ["", " ", "\t"])
@pytest.mark.parametrize("command", ["inspect", "replay", "compile", "run"])
def test_a_blank_model_is_a_usage_error_naming_the_option_in_every_command(
    command: str, blank: str, filled_store: Path
) -> None:
    """Before: inspect and replay exited 1 with "<replace>: key 'model': expected a non-empty string"."""
    transcript = FORMAT_DATA / "craft-agents__session.jsonl"
    args = {
        "inspect": ["inspect", "--store", filled_store, "--json"],
        "replay": ["replay", transcript],
        "compile": ["compile", "--store", filled_store],
        "run": ["run", transcript],
    }[command]
    result = cli(*args, "--budget", "4000", "--model", blank)
    assert result.exit_code == 2, (result.exit_code, result.stderr)
    assert f"Error: Invalid value for '--model': expected a model name, found {blank!r}" in result.stderr
    assert "<replace>" not in result.stderr and result.stdout == ""


def test_more_message_rows_than_their_range_is_a_store_error_not_stop_iteration(tmp_path: Path) -> None:
    """_check_dense looked for a missing seq with next() and no default: a read holding a seq
    twice (more rows than the range) leaked StopIteration out of the store (seen once in
    test_store_sqlite_claim under load); it is now the store's typed error, naming the range."""
    store = Store(tmp_path / "s.db")
    store.append([Message("user", ({"type": "text", "text": f"message {n}"},)) for n in range(4)])
    with pytest.raises(StoreError, match=r"5 message rows were read for the 4 seqs of \[0, 4\)"):
        store._check_dense([0, 1, 2, 2, 3], 0, 4)
    with pytest.raises(StoreError, match="message 2 is missing"):
        store._check_dense([0, 1, 3], 0, 4)
    store._check_dense([0, 1, 2, 3], 0, 4)  # dense: no error
    store.close()
