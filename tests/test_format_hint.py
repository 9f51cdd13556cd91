"""A malformed line under a format the user named says which format the content looks like."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compaction import InvalidTranscript, load_transcript

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_a_named_format_that_fails_on_another_format_names_the_detected_one() -> None:
    with pytest.raises(InvalidTranscript) as caught:
        load_transcript(EXAMPLES / "aider__chat-history__slice.md", format="pi")
    message = str(caught.value)
    assert message.startswith(f"{EXAMPLES / 'aider__chat-history__slice.md'}:1: invalid JSON")
    assert "read as 'pi'; detected from its content it would be 'aider': pass --format aider" in message
    assert caught.value.line == 1 and caught.value.path == str(EXAMPLES / "aider__chat-history__slice.md")


def test_a_malformed_line_in_the_named_format_itself_gets_no_hint(tmp_path: Path) -> None:
    good = (EXAMPLES / "pi__pi-mono__before-compaction.jsonl").read_text(encoding="utf-8").splitlines()
    broken = tmp_path / "session.jsonl"
    broken.write_text("\n".join([good[0], good[1], "{not json", *good[2:]]) + "\n", encoding="utf-8")
    with pytest.raises(InvalidTranscript) as caught:
        load_transcript(broken, format="pi")
    assert ":3: invalid JSON" in str(caught.value)
    assert "detected from its content" not in str(caught.value)
    assert json.loads(good[0])  # the lines around it are the real session's
