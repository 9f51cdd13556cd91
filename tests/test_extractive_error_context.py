"""The offline summary's error entries carry what the error says, and dropped files keep their names.

A compiler's or a test runner's telling words often sit in the lines after the error line
(``Types of parameters … are incompatible``, the ``FAILED`` test's name); an error entry shows
them after ``⟩`` markers.  When a record must drop file lines, their basenames stay on the
``Also touched:`` line.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.blocks import Block
from compaction.summarizers._extract import ERROR_ENTRY_CHARS, extract
from compaction.summarizers._record import ALSO_TOUCHED, Record, parse_record, render
from compaction.tokens.counting import count_text

ENCODING = "o200k_base"

TSC = (
    "src/mode.ts(585,39): error TS2345: Argument of type '(c: { text: string; }) => string' is not assignable "
    "to parameter of type '((value: { type: string; text: string; }, index: number) => string)'.\n"
    "  Type '(c: { text: string; }) => string' is not assignable to type '(value: ImageContent) => string'.\n"
    "    Types of parameters 'c' and 'value' are incompatible.\n"
    "      Type 'ImageContent | TextContent' is not assignable to type '{ text: string; }'.\n"
)
PYTEST = (
    "E           NameError: name 'GitRepo' is not defined\n"
    "\n"
    "/Users/user/Projects/aider/tests/basic/test_repomap.py:332: NameError\n"
    "=========================== short test summary info ============================\n"
    "FAILED tests/basic/test_repomap.py::TestRepoMapAllLanguages::test_get_repo_map_subtree_only\n"
    "========================= 1 failed, 6 passed in 2.31s ==========================\n"
)


def _errors(output: str) -> list[str]:
    messages: list[tuple[str, tuple[Block, ...]]] = [
        (
            "assistant",
            ({"type": "tool_use", "id": "a", "name": "bash", "input": {"command": "npm run check"}},),
        ),
        ("user", ({"type": "tool_result", "tool_use_id": "a", "content": output},)),
    ]
    return [error.line() for error in extract(messages, 0).errors]


def test_a_compiler_error_entry_keeps_the_lines_that_say_what_is_wrong() -> None:
    (entry,) = _errors(TSC)
    assert entry.startswith(
        "[open] run `npm run check`, message 1: src/mode.ts(585,39): error TS2345: Argument of type"
    )
    assert "⟩ Types of parameters 'c' and 'valu" in entry
    assert len(entry.split("message 1: ", 1)[1]) <= ERROR_ENTRY_CHARS


def test_a_test_failure_entry_names_the_failing_test_with_short_paths_and_no_rule_lines() -> None:
    (entry,) = _errors(PYTEST)
    text = entry.split("message 1: ", 1)[1]
    assert text == (
        "E NameError: name 'GitRepo' is not defined ⟩ …/tests/basic/test_repomap.py:332: NameError"
        " ⟩ short test summary info ⟩ FAILED tests/basic/test_repomap.py::TestRepoMapAllLanguages::"
        "test_get_repo_map_subtree_only"
    )


def test_context_lines_that_repeat_the_error_line_are_left_out() -> None:
    output = (
        "litellm.InternalServerError: VertexAIException - File ~/.config/gcloud/creds.json was not found.\n"
        "Retrying in 0.2 seconds...\n"
        "litellm.InternalServerError: VertexAIException - File ~/.config/gcloud/creds.json was not found.\n"
    )
    (entry,) = _errors(output)
    assert "⟩" not in entry
    assert entry.endswith(
        "message 1: litellm.InternalServerError: VertexAIException - File ~/.config/gcloud/creds.json was not found."
    )


def test_an_exit_code_entry_shows_the_lines_before_it() -> None:
    (entry,) = _errors("flake8....................Failed\n- hook id: flake8\nexit code: 1\n")
    assert entry == "[open] run `npm run check`, message 1: exit code: 1 ⟩ flake8 Failed ⟩ - hook id: flake8"


def _many_files(count: int) -> Record:
    record = Record(goal="port the store")
    for n in range(count):
        record.add_file(f"/repo/src/package_{n}/module_{n}.py", "edited", 1 + n % 3)
    return record


def test_dropped_file_lines_keep_their_basenames_busiest_first() -> None:
    out = render(_many_files(30), 160, ENCODING)
    assert count_text(out, ENCODING) <= 160
    also = next(line for line in out.splitlines() if line.startswith(ALSO_TOUCHED))
    names = also[len(ALSO_TOUCHED) :].rstrip(".").split(", ")
    assert names[0] == "module_2.py"  # edited ×3, the busiest of the dropped lines, first
    assert all(name.startswith("module_") and name.endswith(".py") for name in names)
    kept = [line for line in out.splitlines() if line.startswith("- /repo/")]
    assert len(kept) + len(names) > len(kept)  # more files named than lines kept
    assert count_text(also, ENCODING) <= 160 // 4 + 2


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 60), st.integers(40, 400))
def test_every_file_is_a_line_an_also_touched_name_or_counted(count: int, bound: int) -> None:
    out = render(_many_files(count), bound, ENCODING)
    assert count_text(out, ENCODING) <= bound
    back = parse_record(out)
    shown = [p for p in back.files if not p.startswith("…")]
    lines = sum(1 for line in out.splitlines() if line.startswith("- /repo/"))
    more = sum(
        int(line.split()[2])
        for line in out.splitlines()
        if line.startswith("- … ") and "more left out" in line
    )
    lost = Counter(back.omitted)["Files"]
    # each file is shown as a line, or its line is counted as left out (the Also line names some of those)
    assert lines + max(more, lost) == count
    assert len(shown) >= lines


# -- a stitch keeps what its parts kept ---------------------------------------------------------

#: The records the parts of a 9,000-token pip output (aider's, message 1088 of the shipped
#: slice) were summarized into: the error sits in the last lines of the output, in part 1.
PIP_PARTS = (
    "Errors:\n- [open] run `?`, message 1088: ERROR: Cannot install sentence-transformers because these "
    "package versions have conflicting dependencies. ⟩ Traceback (most recent call last): ⟩ File "
    '"…/_vendor/resolvelib/resolvers.py", line 316, in _backjump ⟩ name, candidate = '
    "broken_state.mapping.popitem()",
    "Done:\n- Part 2 of 3 of message 1088: 1 lines of output, no call, error or file in it",
    "Done:\n- Part 3 of 3 of message 1088: 34 lines of output, no call, error or file in it",
)


def _joined(parts: tuple[str, ...] | list[str], kind: str, max_tokens: int = 400) -> str:
    """Join part records the way the compactor asks (``Compactor._merge_request``) and summarize them."""
    from compaction.compactor import compression_image_settings
    from compaction.recipe import Recipe
    from compaction.summarizers import ExtractiveSummarizer
    from compaction.summarizers.base import merge_system_prompt
    from compaction.wire import OutboundRequest, gate

    blocks: list[Block] = [
        {"type": "text", "text": f"Merge these {len(parts)} consecutive records into one."}
    ]
    blocks += [{"type": "text", "text": f"[Record of part {i + 1}]\n{t}"} for i, t in enumerate(parts)]
    request = OutboundRequest(kind, merge_system_prompt(max_tokens), (("user", tuple(blocks)),))  # type: ignore[arg-type]
    gated = gate(
        request,
        compression_image_settings(Recipe()),
        format="openai",
        model="gpt-4o",
        max_output_tokens=max_tokens,
    )
    return ExtractiveSummarizer().summarize(gated, kind=kind).text  # type: ignore[arg-type]


REPORT = (
    "Done:\n- reported (message 1089): Based on the error message, it appears there's a conflict with the "
    "`tokenizers` package version required by different versions of the `transformers` library."
)


def test_a_stitch_of_small_part_records_keeps_their_error() -> None:
    error = PIP_PARTS[0].splitlines()[1]
    parts = _joined(PIP_PARTS, "stitch")
    assert error in parts.splitlines()
    # the round's stitch joins that record with the next message's (split_point's halves)
    assert error in _joined([parts, REPORT], "stitch").splitlines()


_WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=4, max_size=12)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.lists(st.tuples(st.integers(0, 999), st.lists(_WORDS, min_size=2, max_size=30)), max_size=3),
        min_size=2,
        max_size=4,
    )
)
def test_a_stitch_within_the_bound_keeps_every_error_entry(parts: list[list[tuple[int, list[str]]]]) -> None:
    records = []
    for number, errors in enumerate(parts):
        lines = [f"- [open] run `make`, message {seq}: error: {' '.join(words)}" for seq, words in errors]
        records.append("Errors:\n" + "\n".join(lines) if lines else f"Done:\n- Part {number + 1}: no error")
    out = _joined(records, "stitch", max_tokens=400)
    said = {line.split(": ", 1)[1] for r in records for line in r.splitlines() if line.startswith("- [open]")}
    if sum(count_text(r, ENCODING) for r in records) + 40 <= 400:
        # every error stays (one repeated, same command and text, once: the newest)
        kept = [line for line in out.splitlines() if line.startswith("- [open]")]
        assert {line.split(": ", 1)[1] for line in kept} == said
        assert len(kept) == len(said)
    assert count_text(out, ENCODING) <= 400
