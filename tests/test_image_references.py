"""Images given by reference: kept as typed image blocks, priced at the maximum, never shipped.

Issue #13, item 3 ("references, not rejections"): an image whose bytes a transcript does not
hold (``blob:sha256:...`` in pi-derived sessions, an ``attachment://`` missing from an Inspect
log, a file path, an OpenAI file id, a Craft Agents attachment stored outside the session) is
imported as ``{"type": "image", "source": {"type": "reference", ...}}``, kept in the store,
priced as the model's documented maximum, and shipped as a loud placeholder naming it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.blocks import Message, image_reference_block
from compaction.cli import main
from compaction.errors import InvalidMessage
from compaction.formats import load_transcript
from compaction.images import NOT_IN_TRANSCRIPT, find_image_sites, placeholder_for
from compaction.outputs import request_format
from compaction.policy import ImageSettings
from compaction.store import open_store
from compaction.store.ingest import prepare
from compaction.tokens.image_pricing import max_image_tokens
from compaction.wire import OutboundRequest, count_wire_images, gate

DATA = Path(__file__).resolve().parent / "data" / "formats"
BLOB = "blob:sha256:9f2c0d5e7a1b44c1d0e3f6a7b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f7081"


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _pi_session(tmp_path: Path) -> Path:
    call = {
        "role": "assistant",
        "content": [{"type": "toolCall", "id": "c1", "name": "screenshot", "arguments": {}}],
    }
    result = {
        "role": "toolResult",
        "toolCallId": "c1",
        "content": [
            {"type": "text", "text": "Took a screenshot of the page."},
            {"type": "image", "data": BLOB, "mimeType": "image/png"},
        ],
    }
    lines = [
        {"type": "session", "version": 3, "id": "s", "cwd": "/w"},
        {
            "type": "message",
            "id": "u",
            "parentId": None,
            "message": {"role": "user", "content": "Check the page."},
        },
        {"type": "message", "id": "a", "parentId": "u", "message": call},
        {"type": "message", "id": "b", "parentId": "a", "message": result},
    ]
    return _write(tmp_path, "pi.jsonl", "".join(json.dumps(line) + "\n" for line in lines))


def _inspect_log(tmp_path: Path, image: str) -> Path:
    log = json.loads((DATA / "inspect-ai__log_images.json").read_text())
    for message in log["samples"][0]["messages"]:
        if isinstance(message.get("content"), list):
            for part in message["content"]:
                if part.get("type") == "image":
                    part["image"] = image
    return _write(tmp_path, "log.json", json.dumps(log))


def _responses_items(tmp_path: Path) -> Path:
    items = [
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What does this mock-up show?"},
                {"type": "input_image", "file_id": "file-7Qm2preview", "detail": "auto"},
            ],
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "A login form."}],
        },
    ]
    return _write(tmp_path, "items.json", json.dumps(items))


def _craft_session(tmp_path: Path) -> Path:
    header = {
        "id": "s1",
        "workspaceRootPath": "/w",
        "createdAt": 1,
        "messageCount": 2,
        "model": "claude-sonnet-4-5",
    }
    attachment = {
        "id": "att-1",
        "type": "image",
        "name": "screen.png",
        "mimeType": "image/png",
        "size": 81234,
        "storedPath": "/w/.craft/sessions/s1/attachments/att-1.png",
    }
    user = {
        "id": "m1",
        "type": "user",
        "content": "The button overlaps.",
        "timestamp": 2,
        "attachments": [attachment],
    }
    reply = {"id": "m2", "type": "assistant", "content": "I see it.", "timestamp": 3}
    return _write(tmp_path, "session.jsonl", "".join(json.dumps(r) + "\n" for r in (header, user, reply)))


def _references(messages: list[Message]) -> list[dict]:
    found = []
    for message in messages:
        stack = list(message.content)
        while stack:
            block = stack.pop(0)
            if block.get("type") == "image" and block["source"]["type"] == "reference":
                found.append(block["source"])
            if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                stack.extend(block["content"])
    return found


def test_pi_blob_reference_is_kept_typed_with_the_text_of_its_result(tmp_path: Path) -> None:
    parsed = load_transcript(_pi_session(tmp_path))
    assert parsed.format == "pi" and parsed.skipped == 0
    result = parsed.messages[2].content[0]
    assert result["type"] == "tool_result" and result["tool_use_id"] == "c1"
    assert result["content"] == [
        {"type": "text", "text": "Took a screenshot of the page."},
        {"type": "image", "source": {"type": "reference", "reference": BLOB, "media_type": "image/png"}},
    ]


@pytest.mark.parametrize(
    "image",
    ["attachment://00000000000000000000000000000000", "/home/eval/screenshots/step-3.png"],
    ids=["missing-attachment", "file-path"],
)
def test_inspect_unresolved_image_is_a_reference_and_the_text_stays(tmp_path: Path, image: str) -> None:
    parsed = load_transcript(_inspect_log(tmp_path, image))
    assert parsed.format == "inspect-ai" and parsed.skipped == 0
    user = parsed.messages[1]
    assert user.content[0] == {"type": "text", "text": "What is this a picture of?"}
    assert _references(parsed.messages) == [{"type": "reference", "reference": image}]


def test_responses_file_id_image_is_a_reference_and_the_text_stays(tmp_path: Path) -> None:
    parsed = load_transcript(_responses_items(tmp_path))
    assert parsed.format == "openai-responses"
    assert parsed.messages[0].content == (
        {"type": "text", "text": "What does this mock-up show?"},
        {"type": "image", "source": {"type": "reference", "reference": "file-7Qm2preview"}},
    )


def test_craft_attachment_without_bytes_is_a_reference_and_the_text_stays(tmp_path: Path) -> None:
    parsed = load_transcript(_craft_session(tmp_path))
    assert parsed.format == "craft-agents"
    assert parsed.messages[0].content == (
        {"type": "text", "text": "The button overlaps."},
        image_reference_block("/w/.craft/sessions/s1/attachments/att-1.png", "image/png"),
    )


def test_the_store_keeps_the_reference_and_records_it_as_an_image_site(tmp_path: Path) -> None:
    message = load_transcript(_pi_session(tmp_path)).messages[2]
    stored = prepare(message, "o200k_base")
    assert stored.blobs == ()  # no bytes to keep: the reference itself is the stored form
    assert json.loads(stored.content) == [json.loads(json.dumps(b)) for b in message.content]
    assert json.loads(stored.images) == [
        {"source": "reference", "reference": BLOB, "media_type": "image/png", "location": "tool_result"}
    ]


@pytest.mark.parametrize(
    ("fmt", "model", "maximum"),
    [
        ("anthropic", "claude-sonnet-4-5", 1600),  # docs.claude.com vision: ~1,600 tokens at most
        ("openai", "gpt-4o", 85 + 170 * 8),  # images-vision guide: 8 tiles of 512 px at most
        ("openai", "gpt-4.1-mini", 2489),  # patch models: 1536 patches x 1.62
    ],
)
def test_a_reference_is_priced_as_the_documented_maximum(fmt: str, model: str, maximum: int) -> None:
    (site,) = find_image_sites([image_reference_block(BLOB, "image/png")])
    assert (site.width, site.height, site.byte_size) == (None, None, None)
    assert site.forced_reason == NOT_IN_TRANSCRIPT
    assert (
        request_format(fmt).image_tokens(site.width, site.height, model) == maximum == max_image_tokens(model)
    )


def test_the_placeholder_names_the_reference_and_why() -> None:
    (site,) = find_image_sites([image_reference_block(BLOB, "image/png")])
    assert placeholder_for(site, NOT_IN_TRANSCRIPT) == (
        f"[image not shown: image given by reference {BLOB!r} (image/png, size unknown); reason: its bytes "
        "are not in the transcript, only a reference to them, so it cannot be shown. "
        "The reference is kept in the store.]"
    )
    long = "/" + "x" * 400
    text = placeholder_for(find_image_sites([image_reference_block(long)])[0], NOT_IN_TRANSCRIPT)
    assert f"'{long[:197]}...'" in text and "media type unknown" in text


def test_a_reference_without_a_string_reference_is_malformed() -> None:
    with pytest.raises(InvalidMessage, match="reference image source needs a non-empty string 'reference'"):
        Message("user", ({"type": "image", "source": {"type": "reference", "reference": ""}},))


def _has_reference_source(value: object) -> bool:
    if isinstance(value, dict):
        if value.get("type") == "reference" and "reference" in value:
            return True
        return any(_has_reference_source(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_reference_source(v) for v in value)
    return False


_REFERENCE = st.one_of(
    st.builds(lambda h: f"blob:sha256:{h}", st.text("0123456789abcdef", min_size=1, max_size=64)),
    st.builds(lambda h: f"attachment://{h}", st.text("0123456789abcdef", min_size=1, max_size=32)),
    st.text(min_size=1, max_size=300).filter(lambda t: t.strip() != ""),
)


@settings(max_examples=80, deadline=None)
@given(
    reference=_REFERENCE,
    media_type=st.sampled_from([None, "image/png", "image/jpeg"]),
    nested=st.booleans(),
    fmt=st.sampled_from(["openai", "anthropic", "openai-responses"]),
    policy=st.sampled_from(["live", "placeholders"]),
    text=st.text(min_size=1, max_size=40).filter(lambda t: t.strip() != ""),
)
def test_a_reference_never_ships_as_an_image_and_its_text_stays(
    reference: str, media_type: str | None, nested: bool, fmt: str, policy: str, text: str
) -> None:
    image = image_reference_block(reference, media_type)
    if nested:
        messages = (
            ("user", ({"type": "text", "text": "look"},)),
            ("assistant", ({"type": "tool_use", "id": "c1", "name": "shot", "input": {}},)),
            (
                "user",
                (
                    {
                        "type": "tool_result",
                        "tool_use_id": "c1",
                        "content": [{"type": "text", "text": text}, image],
                    },
                ),
            ),
        )
    else:
        messages = (("user", ({"type": "text", "text": text}, image)),)
    gated = gate(OutboundRequest("live", None, messages), ImageSettings(policy=policy), format=fmt)  # type: ignore[arg-type]
    body = json.loads(gated.payload)
    assert count_wire_images(body, fmt) == 0 and gated.images_shown == 0
    assert not _has_reference_source(body)  # no image source of that type on the wire
    assert [r.reason for r in gated.replacements if r.kind == "image"] == [NOT_IN_TRANSCRIPT]
    shown = json.dumps(body, ensure_ascii=False)
    assert json.dumps(text, ensure_ascii=False)[1:-1] in shown
    clipped = reference if len(reference) <= 200 else reference[:197] + "..."
    assert json.dumps(repr(clipped), ensure_ascii=False)[1:-1] in shown


@pytest.mark.parametrize("fmt", ["openai", "anthropic", "openai-responses"])
def test_run_keeps_the_reference_in_the_store_and_ships_its_placeholder(tmp_path: Path, fmt: str) -> None:
    """End to end: import into an SQLite store, compile, write the body; reopen the store."""
    session, store_path, out = _pi_session(tmp_path), tmp_path / "store.sqlite", tmp_path / "body.json"
    args = ["run", str(session), "--budget", "64000", "--to", fmt, "--store", str(store_path)]
    result = CliRunner().invoke(main, [*args, "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["images_shown"], report["images_replaced"]) == (0, 1)
    body = json.loads(out.read_text())
    assert count_wire_images(body, fmt) == 0 and not _has_reference_source(body)
    shipped = json.dumps(body)
    assert "Took a screenshot of the page." in shipped
    assert f"[image not shown: image given by reference '{BLOB}' (image/png, size unknown)" in shipped
    with open_store(str(store_path)) as store:
        stored = store.messages()[2].content[0]["content"]
    assert stored[1] == image_reference_block(BLOB, "image/png")


@pytest.mark.parametrize(("fmt", "model"), [("anthropic", "claude-sonnet-4-5"), ("openai", "gpt-4o")])
def test_a_stored_reference_is_priced_at_the_maximum_where_the_store_sizes_messages(
    tmp_path: Path, fmt: str, model: str
) -> None:
    """The store's facts of a message (what chunking and the compactor size it by) carry the
    reference with no pixel size, so the request format prices it at its documented maximum."""
    messages = load_transcript(_pi_session(tmp_path)).messages
    with open_store(str(tmp_path / "store.sqlite")) as store:
        store.append(messages)
        facts = store.facts()
    (site,) = facts[2].images
    assert (site.source, site.reference, site.location) == ("reference", BLOB, "tool_result")
    assert request_format(fmt).image_tokens(site.width, site.height, model) == max_image_tokens(model)
    assert facts[0].images == () and facts[1].images == ()


@pytest.mark.parametrize(
    "url", ["/home/me/shots/step-3.png", "file:///home/me/shots/step-3.png", "gs://bucket/step-3.png"]
)
def test_an_openai_chat_image_url_that_is_no_web_url_is_a_reference(tmp_path: Path, url: str) -> None:
    messages = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Look."}, {"type": "image_url", "image_url": {"url": url}}],
        },
        {"role": "assistant", "content": "A chart."},
    ]
    parsed = load_transcript(_write(tmp_path, "chat.json", json.dumps(messages)))
    assert parsed.format == "openai"
    assert parsed.messages[0].content == ({"type": "text", "text": "Look."}, image_reference_block(url))


def test_a_web_url_image_stays_a_url_image(tmp_path: Path) -> None:
    url = "HTTPS://example.com/chart.png"
    messages = [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": url}}]}]
    parsed = load_transcript(_write(tmp_path, "chat.json", json.dumps(messages)))
    assert parsed.messages[0].content == ({"type": "image", "source": {"type": "url", "url": url}},)


@pytest.mark.parametrize(
    "part",
    [
        {"type": "image", "source_type": "id", "id": "file-abc123"},
        {"type": "image", "file_id": "file-abc123", "mime_type": "image/png"},
    ],
    ids=["source_type-id", "file_id"],
)
def test_a_langchain_image_given_by_file_id_is_a_reference(tmp_path: Path, part: dict) -> None:
    dump = [
        {"type": "human", "data": {"content": [{"type": "text", "text": "What is in this file?"}, part]}},
        {"type": "ai", "data": {"content": "A receipt."}},
    ]
    parsed = load_transcript(_write(tmp_path, "dump.json", json.dumps(dump)))
    assert parsed.format == "langchain"
    expected = image_reference_block("file-abc123", part.get("mime_type"))
    assert parsed.messages[0].content == ({"type": "text", "text": "What is in this file?"}, expected)
