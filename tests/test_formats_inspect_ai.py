"""Inspect AI eval logs: samples' messages, attachment:// references resolved or shown loudly."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.formats import detect_format, load_transcript

DATA = Path(__file__).resolve().parent / "data" / "formats"
IMAGES = DATA / "inspect-ai__log_images.json"
BROWSER = DATA / "inspect-ai__browser.json"


def test_the_image_log_resolves_its_attachment_into_the_png() -> None:
    parsed = load_transcript(IMAGES)
    assert parsed.format == "inspect-ai" and parsed.skipped == 0
    assert [m.role for m in parsed.messages] == ["system", "user", "assistant"]
    user = parsed.messages[1]
    assert user.content[0] == {"type": "text", "text": "What is this a picture of?"}
    image = user.content[1]
    assert image["type"] == "image" and image["source"]["media_type"] == "image/png"
    png = base64.b64decode(image["source"]["data"])
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[16:20], "big") == 34  # 34 x 30 pixels
    assert all(m.meta["inspect_sample"] == "1" for m in parsed.messages)


def test_the_browser_log_pairs_every_tool_call() -> None:
    messages = load_transcript(BROWSER).messages
    assert len(messages) == 10 and messages[0].role == "user"
    uses = [b["id"] for m in messages for b in m.content if b["type"] == "tool_use"]
    results = [b["tool_use_id"] for m in messages for b in m.content if b["type"] == "tool_result"]
    assert len(uses) == 4 and uses == results
    first_call = next(b for b in messages[1].content if b["type"] == "tool_use")
    assert first_call["name"] == "web_browser_go" and first_call["input"] == {
        "url": "https://www.aisi.gov.uk/"
    }
    assert messages[-1].content[0]["text"].startswith("The AI Security Institute (AISI)")


def test_detection_reads_the_whole_pretty_printed_log() -> None:
    assert detect_format(IMAGES) == "inspect-ai" and detect_format(BROWSER) == "inspect-ai"


def test_a_missing_attachment_is_an_image_reference_and_the_text_stays(tmp_path: Path) -> None:
    log = json.loads(IMAGES.read_text())
    log["samples"][0]["attachments"] = {}
    path = tmp_path / "log.json"
    path.write_text(json.dumps(log))
    user = load_transcript(path).messages[1]
    assert user.content[0]["text"] == "What is this a picture of?"
    assert user.content[1] == {
        "type": "image",
        "source": {"type": "reference", "reference": "attachment://734b3dc396aa9924b5f2a48de42561d2"},
    }


def test_tool_errors_are_kept_in_the_result(tmp_path: Path) -> None:
    log = {
        "version": 2,
        "eval": {},
        "samples": [
            {
                "id": "s",
                "epoch": 2,
                "messages": [
                    {"role": "user", "content": "run it"},
                    {
                        "role": "assistant",
                        "content": "",
                        "tool_calls": [{"id": "bash_1", "function": "bash", "arguments": {"cmd": "ls"}}],
                    },
                    {
                        "role": "tool",
                        "tool_call_id": "bash_1",
                        "function": "bash",
                        "content": "",
                        "error": {"type": "timeout", "message": "Command timed out"},
                    },
                ],
            }
        ],
    }
    path = tmp_path / "log.json"
    path.write_text(json.dumps(log, indent=2))
    messages = load_transcript(path).messages
    result = messages[2].content[0]
    assert result["is_error"] is True and result["content"] == "Error (timeout): Command timed out"
    assert {m.meta["inspect_sample"] for m in messages} == {"s#2"}


@settings(max_examples=40, deadline=None)
@given(
    samples=st.lists(
        st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=4), min_size=1, max_size=4
    )
)
def test_every_sample_is_imported_in_order(tmp_path_factory, samples: list[list[str]]) -> None:
    log = {
        "version": 2,
        "eval": {"task": "t"},
        "samples": [
            {"id": n, "epoch": 1, "messages": [{"role": "user", "content": t} for t in texts]}
            for n, texts in enumerate(samples)
        ],
    }
    path = tmp_path_factory.mktemp("i") / "log.json"
    path.write_text(json.dumps(log, indent=2))
    messages = load_transcript(path).messages
    assert [(m.meta["inspect_sample"], m.content[0]["text"]) for m in messages] == [
        (str(n), t) for n, texts in enumerate(samples) for t in texts
    ]
