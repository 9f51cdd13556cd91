"""The registry of transcript formats: priority order, each sniffer on real samples, wrong guesses,
and detection on arbitrary content."""

from __future__ import annotations

import json
import pkgutil
import re
from importlib import import_module
from pathlib import Path

import pytest
from cli_runner import runner
from hypothesis import given, settings
from hypothesis import strategies as st

import compaction.formats
from compaction.cli import main
from compaction.errors import InvalidTranscript, UnknownFormat
from compaction.formats import FORMATS, REGISTRY, TranscriptFormat, detect_format, load_transcript
from compaction.formats._registry import detect, format_named
from compaction.formats._sniff import Sample

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
CASES = ROOT / "tests" / "data" / "cases"
FORMAT_DATA = ROOT / "tests" / "data" / "formats"

#: Real transcripts of each format, from the corpus the parser tests use.
SAMPLES: dict[str, list[Path]] = {
    "pi": [EXAMPLES / "pi__pi-mono__before-compaction.jsonl"],
    "codex": [EXAMPLES / "codex" / "claude-code-log__codex-rollout.jsonl"],
    "claude-code": sorted((EXAMPLES / "claude-code").glob("*.jsonl")),
    "swe-agent": [EXAMPLES / "swe-agent__marshmallow-1867__function-calling.traj"],
    "openhands": [EXAMPLES / "openhands__multi-swe-bench__output.jsonl"],
    "agent-tars": [EXAMPLES / "agent-tars__browser__event-stream-with-many-images.json"],
    "aider": [EXAMPLES / "aider__chat-history__slice.md"],
    "anthropic": sorted(CASES.glob("*.json")),
    "openai": [CASES / "malformed-line.jsonl"],
    "trajectory": [FORMAT_DATA / "trajectory__subagent-tool-calls.json"],
    "gemini-cli": [FORMAT_DATA / "gemini-cli__stream-json-tool-session.jsonl"],
    "craft-agents": [FORMAT_DATA / "craft-agents__session.jsonl"],
    "inspect-ai": [FORMAT_DATA / "inspect-ai__log_images.json", FORMAT_DATA / "inspect-ai__browser.json"],
    "openai-responses": [FORMAT_DATA / "openai-responses__agent-input-items.json"],
    "langchain": [FORMAT_DATA / "langchain__messages_to_dict.json", FORMAT_DATA / "langgraph__state_dumpd.json"],
    "cline": [FORMAT_DATA / "cline__api_conversation_history.json"],
}
GENERIC = ("anthropic", "openai")

SAMPLE_CASES = [(name, path) for name, paths in SAMPLES.items() for path in paths]


def sample_of(path: Path) -> Sample:
    data = path.read_bytes()
    return Sample(data[: 64 * 1024].decode("utf-8-sig", errors="replace"), lambda: data.decode("utf-8-sig"))


# -- the registry --------------------------------------------------------------------------------


def test_registry_is_ordered_by_priority() -> None:
    priorities = [fmt.priority for fmt in REGISTRY]
    assert priorities == sorted(priorities, reverse=True)
    assert len(set(priorities)) == len(priorities), "equal priorities would leave the order to the listing"
    names = [fmt.name for fmt in REGISTRY]
    assert sorted(names) == sorted(FORMATS) and len(set(names)) == len(names)
    assert names[-2:] == ["anthropic", "openai"]  # the generic chat formats are asked last
    assert names.index("pi") < names.index("anthropic") and names.index("claude-code") < names.index(
        "anthropic"
    )


def test_every_format_module_is_registered() -> None:
    modules = [
        m.name for m in pkgutil.iter_modules(compaction.formats.__path__) if not m.name.startswith("_")
    ]
    offered = [import_module(f"compaction.formats.{name}").FORMAT for name in modules]
    assert all(isinstance(fmt, TranscriptFormat) for fmt in offered)
    assert set(offered) == set(REGISTRY)
    assert set(SAMPLES) == set(FORMATS), "every format needs a real sample in SAMPLES"


def test_format_named_and_unknown_names() -> None:
    assert [format_named(name).name for name in FORMATS] == list(FORMATS)
    with pytest.raises(UnknownFormat) as caught:
        format_named("xml", "chat.xml")
    message = str(caught.value)
    assert message.startswith("chat.xml: unknown format 'xml'")
    assert all(name in message for name in FORMATS)


# -- each format on its own samples ----------------------------------------------------------------


@pytest.mark.parametrize(("name", "path"), SAMPLE_CASES, ids=lambda v: v.name if isinstance(v, Path) else v)
def test_each_sniffer_accepts_its_own_sample_and_detection_names_it(name: str, path: Path) -> None:
    assert format_named(name).sniff(sample_of(path))
    assert detect_format(path) == name
    try:  # the head alone may not tell (a pretty-printed document), but it never misleads
        assert detect(path.read_bytes()[: 64 * 1024], str(path)).name == name
    except UnknownFormat:
        assert path.suffix == ".json"


@pytest.mark.parametrize("name", [fmt.name for fmt in REGISTRY if fmt.name not in GENERIC])
def test_specific_sniffers_refuse_the_other_formats_samples(name: str) -> None:
    sniff = format_named(name).sniff
    claimed = [path.name for other, path in SAMPLE_CASES if other != name and sniff(sample_of(path))]
    assert claimed == []


def test_explicit_format_key_decides_between_the_chat_formats(tmp_path: Path) -> None:
    messages = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]}]
    path = tmp_path / "chat.json"
    path.write_text(json.dumps({"format": "openai", "system": "be brief", "messages": messages}), "utf-8")
    assert detect_format(path) == "openai"
    path.write_text(json.dumps({"format": "anthropic", "messages": []}), "utf-8")
    assert detect_format(path) == "anthropic"


def test_a_document_too_long_for_the_head_is_read_whole(tmp_path: Path) -> None:
    filler = {"role": "user", "content": "x" * 70_000}
    path = tmp_path / "long.json"
    path.write_text(
        json.dumps([filler, {"type": "tool_result", "toolCallId": "c", "content": "ok"}]), "utf-8"
    )
    with pytest.raises(UnknownFormat, match="matches none"):
        detect_format(path, head=path.read_bytes()[: 64 * 1024])
    assert detect_format(path) == "agent-tars"


# -- a wrong guess ---------------------------------------------------------------------------------


def test_a_failed_guess_names_the_format_it_detected(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text(
        '{"type": "user_message", "content": "hi"}\n{"type": "tool_result", "content": \n', "utf-8"
    )
    with pytest.raises(InvalidTranscript) as caught:
        load_transcript(path)
    error = caught.value
    assert error.path == str(path) and error.line == 2
    assert str(error).startswith(f"{path}:2: invalid JSON")
    assert "'agent-tars', detected from its content" in str(error) and "--format" in str(error)
    with pytest.raises(InvalidTranscript) as chosen:
        load_transcript(path, format="agent-tars")
    assert "detected" not in str(chosen.value)


def test_a_failed_guess_of_a_whole_document_names_the_format(tmp_path: Path) -> None:
    path = tmp_path / "events.json"
    path.write_text('[\n  {"type": "user_message", "content": "hi"},\n  {"type": "tool_result",\n', "utf-8")
    with pytest.raises(InvalidTranscript, match="whole file is one JSON document.*'agent-tars', detected"):
        load_transcript(path)
    result = runner().invoke(main, ["import", str(path), "--store", str(tmp_path / "s.db")])
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and "'agent-tars'" in lines[0]


def test_lenient_problems_stay_as_they_were(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    path.write_text('{"type": "user_message", "content": "hi"}\n{"type": \n', "utf-8")
    parsed = load_transcript(path, lenient=True)
    assert parsed.format == "agent-tars" and parsed.skipped == 1
    assert parsed.problems == [f"{path}:2: invalid JSON: Expecting value at column 10"]


# -- arbitrary content -----------------------------------------------------------------------------

#: Keys and values the sniffers look for, so that generated JSON lands near their decisions.
KEYS = (
    "type role content message payload cwd version parentUuid uuid sessionId instance_id history instruction "
    "trajectory info messages system format events"
).split()
VALUES = (
    "session message user_message tool_result response_item user assistant tool toolResult text tool_use "
    "image_url openai anthropic"
).split()
SCALARS = st.one_of(st.sampled_from(VALUES), st.integers(-2, 2), st.none(), st.booleans())
VALUES_ST = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(KEYS), inner, max_size=3)
    ),
    max_leaves=6,
)
OBJECTS = st.dictionaries(st.sampled_from(KEYS), VALUES_ST, max_size=4)
JSON_CONTENT = st.one_of(
    st.lists(OBJECTS, min_size=1, max_size=4).map(lambda rows: "\n".join(json.dumps(row) for row in rows)),
    st.lists(OBJECTS, max_size=4).map(json.dumps),
    st.lists(OBJECTS, max_size=3).map(lambda rows: json.dumps(rows, indent=1)),
    OBJECTS.map(lambda row: json.dumps(row, indent=1)),
).map(str.encode)
ARBITRARY = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200).map(lambda text: text.encode("utf-8", "surrogatepass")),
    JSON_CONTENT,
    st.tuples(JSON_CONTENT, st.binary(max_size=20)).map(lambda parts: parts[0] + parts[1]),
)


def outcome(data: bytes, whole: bool) -> str:
    """Return the detected name, or the error: only the library's typed errors may escape."""
    read = (lambda: data.decode("utf-8-sig", errors="replace")) if whole else None
    try:
        return detect(data, "sample", read).name
    except UnknownFormat as err:
        return f"UnknownFormat: {err}"
    except InvalidTranscript as err:
        return f"InvalidTranscript: {err}"


@settings(max_examples=300, deadline=None)
@given(data=ARBITRARY, whole=st.booleans())
def test_detection_is_deterministic_and_raises_only_typed_errors(data: bytes, whole: bool) -> None:
    first = outcome(data, whole)
    assert outcome(data, whole) == first
    if first.startswith(("UnknownFormat", "InvalidTranscript")):
        # one message, naming the file (and the line, for a damaged JSON document: "sample:1: ")
        assert re.match(r"sample(:[0-9]+)?: ", first.split(": ", 1)[1])
        assert "\n" not in first


@settings(max_examples=150, deadline=None)
@given(data=ARBITRARY, lenient=st.booleans())
def test_loading_arbitrary_content_raises_only_typed_errors(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, lenient: bool
) -> None:
    path = tmp_path_factory.mktemp("arbitrary") / "transcript"
    path.write_bytes(data)
    try:
        parsed = load_transcript(path, lenient=lenient)
    except InvalidTranscript as err:  # UnknownFormat included
        assert str(err).startswith(f"{path}")
    else:
        assert parsed.format in FORMATS
