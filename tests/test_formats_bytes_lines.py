"""JSONL formats read the file's bytes a line at a time (issue #14, item 7: parse memory).

The bytes path must read exactly what the decoded-text path read: the same records, the
same problems under lenient parsing, the same messages from every shipped JSONL sample; a
file that is not UTF-8 is refused whole, naming the byte, lenient or not; a BOM is dropped.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.errors import InvalidTranscript
from compaction.formats import _lines_of, claude_code, codex, load_transcript, openhands, pi
from compaction.formats._common import Context, finish, iter_jsonl

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

line_text = st.one_of(
    st.dictionaries(st.text(max_size=5), st.one_of(st.integers(), st.text(max_size=12)), max_size=3).map(
        lambda d: json.dumps(d, ensure_ascii=False)
    ),
    st.lists(st.integers(), max_size=3).map(json.dumps),
    st.text(alphabet=st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), max_size=20),
    st.just(""),
    st.just("   "),
    st.just('{"emoji": "🙂 ä ß"}'),
)


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(line_text, max_size=12), trailing=st.booleans())
def test_bytes_and_text_give_the_same_records_and_problems(lines: list[str], trailing: bool) -> None:
    text = "\n".join(lines) + ("\n" if trailing else "")
    from_text, from_bytes = Context("t.jsonl", lenient=True), Context("t.jsonl", lenient=True)
    assert list(iter_jsonl(text, from_text)) == list(iter_jsonl(text.encode("utf-8"), from_bytes))
    assert from_text.problems == from_bytes.problems and from_text.skipped == from_bytes.skipped


SAMPLES = [
    (pi, EXAMPLES / "pi__pi-mono__before-compaction.jsonl"),
    (codex, EXAMPLES / "codex" / "claude-code-log__codex-rollout.jsonl"),
    (openhands, EXAMPLES / "openhands__multi-swe-bench__output.jsonl"),
    *[(claude_code, path) for path in sorted((EXAMPLES / "claude-code").glob("*.jsonl"))],
]


@pytest.mark.parametrize(("module", "path"), SAMPLES, ids=lambda v: getattr(v, "name", None) or v.__name__)
def test_every_shipped_jsonl_sample_reads_the_same_from_bytes(module, path: Path) -> None:  # noqa: ANN001
    assert module.FORMAT.reads_bytes
    data = path.read_bytes()
    from_text, from_bytes = Context(str(path), lenient=True), Context(str(path), lenient=True)
    expected = finish(module.parse(data.decode("utf-8-sig"), from_text), from_text)
    got = finish(module.parse(data, from_bytes), from_bytes)
    assert got == expected and len(got) > 0
    assert from_text.problems == from_bytes.problems
    assert load_transcript(path, format=module.FORMAT.name, lenient=True).messages == expected


@pytest.mark.parametrize("lenient", [False, True])
def test_a_line_that_is_not_utf8_refuses_the_file_naming_the_byte(tmp_path: Path, lenient: bool) -> None:
    good = b'{"type":"message","message":{"role":"user","content":"hi"}}\n'
    path = tmp_path / "bad.jsonl"
    path.write_bytes(good * 2 + b'{"type":"message","message":{"role":"user","content":"\xff"}}\n')
    offset = len(good) * 2 + good.index(b'hi"')
    with pytest.raises(InvalidTranscript, match=rf"bad.jsonl.*not UTF-8 text \(byte {offset}: invalid start byte\)"):
        load_transcript(path, format="pi", lenient=lenient)


def test_a_leading_bom_is_dropped(tmp_path: Path) -> None:
    sample = EXAMPLES / "pi__pi-mono__before-compaction.jsonl"
    with_bom = tmp_path / "bom.jsonl"
    with_bom.write_bytes(b"\xef\xbb\xbf" + sample.read_bytes())
    assert load_transcript(with_bom).messages == load_transcript(sample).messages


@settings(max_examples=200, deadline=None)
@given(data=st.binary(max_size=60).map(lambda b: b.replace(b"\r", b"\n")), bom=st.booleans())
def test_lines_read_from_a_file_are_the_split_of_its_bytes(tmp_path_factory, data: bytes, bom: bool) -> None:  # noqa: ANN001
    path = tmp_path_factory.mktemp("lines") / "f.jsonl"
    whole = (b"\xef\xbb\xbf" if bom else b"") + data
    path.write_bytes(whole)
    text = whole[3:] if whole.startswith(b"\xef\xbb\xbf") else whole  # as utf-8-sig drops one BOM
    with path.open("rb") as handle:
        assert list(_lines_of(handle)) == text.split(b"\n")
