"""The inspector's data and page: the composition adds up, every shown summary is there, hostile text is escaped."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner
from inspect_fixtures import HOSTILE, HUGE, hostile_store

from compaction import Recipe, Store
from compaction.cli import main
from compaction.inspect import (
    PREVIEW_LIMIT,
    TEXT_LIMIT,
    UnknownSummary,
    find_summary,
    inspect_store,
    terminal_safe,
    truncate,
)
from compaction.inspect_html import escape, render_html

SETTINGS = [
    pytest.param(6000, {}, id="openai-6k"),
    pytest.param(8000, {"vision": False}, id="openai-text-only"),
    pytest.param(9000, {"output_format": "anthropic"}, id="anthropic-9k"),
    pytest.param(12000, {"vision": False, "output_format": "anthropic"}, id="anthropic-text-only"),
    pytest.param(40000, {}, id="everything-raw"),
]


class _Elements(HTMLParser):
    """Collect start tags and the text outside tags of a page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _parse(page: str) -> _Elements:
    parser = _Elements()
    parser.feed(page)
    parser.close()
    return parser


@pytest.mark.parametrize(("budget", "settings"), SETTINGS)
def test_composition_adds_up_to_the_request_and_every_shown_summary_is_listed(
    budget: int, settings: dict[str, object]
) -> None:
    store, recipe, compiled = hostile_store(":memory:", budget, **settings)
    with store:
        data = inspect_store(store, recipe)
    assert data.tokens == compiled.tokens <= budget
    assert sum(p.tokens for p in data.composition) == compiled.tokens
    assert all(p.tokens >= 0 for p in data.composition)
    assert [s.id for s in data.summaries] == [s.id for s in compiled.summaries]
    assert [(s.start_seq, s.end_seq, s.level) for s in data.summaries] == [
        (s.start_seq, s.end_seq, s.level) for s in compiled.summaries
    ]
    parts = {p.name: p.tokens for p in data.composition}
    assert parts["ask ledger"] == compiled.ledger_tokens
    for level in {s.level for s in data.summaries}:
        assert parts[f"summaries L{level}"] == sum(s.tokens for s in data.summaries if s.level == level)
    # every message is accounted for once, in the state the request shows it
    states = [m.state for m in data.messages]
    assert len(states) == data.total_messages == 39
    assert states[0] == "pinned"
    assert all(m.state == "summarized" for m in data.messages[1 : compiled.live_start])
    assert {m.seq for m in data.messages if m.state == "masked"} == set(compiled.masked_seqs)
    live = [m for m in data.messages if m.state in ("raw", "masked")]
    assert [m.seq for m in live] == list(range(max(1, compiled.live_start), 39))
    assert sum(m.shown_tokens or 0 for m in live) == parts["raw window"] + parts["masked window"] + parts["images"]
    for message in data.messages[1 : compiled.live_start]:
        summary = next(s for s in data.summaries if s.start_seq <= message.seq < s.end_seq)
        assert message.summary_id == summary.id
    assert len(data.placeholders) == len(compiled.request.replacements)
    assert data.images_shown == compiled.request.images_shown
    if settings.get("vision") is False:
        assert data.images_shown == 0


def test_text_only_request_lists_each_replaced_image_with_its_reason_and_source_message() -> None:
    store, recipe, compiled = hostile_store(":memory:", 8000, vision=False)
    with store:
        data = inspect_store(store, recipe)
    images = [p for p in data.placeholders if p.kind == "image"]
    assert images and len(images) == compiled.request.images_replaced
    for placeholder in images:
        assert placeholder.reason and placeholder.media_type == "image/png"
        assert placeholder.seq is not None and placeholder.seq >= compiled.live_start
        assert placeholder.width and placeholder.height == 48


def test_the_json_form_is_the_same_data() -> None:
    store, recipe, _compiled = hostile_store(":memory:", 9000, output_format="anthropic")
    with store:
        data = inspect_store(store, recipe)
    decoded = json.loads(json.dumps(data.to_dict()))
    assert decoded["tokens"] == data.tokens
    assert [p["tokens"] for p in decoded["composition"]] == [p.tokens for p in data.composition]
    assert [s["id"] for s in decoded["summaries"]] == [s.id for s in data.summaries]
    assert decoded["masked_outputs"] == {str(k): v for k, v in data.masked_outputs.items()}
    assert len(decoded["messages"]) == 39


def test_hostile_text_is_escaped_and_huge_text_is_cut_with_a_marker() -> None:
    store, recipe, _compiled = hostile_store(":memory:", 12000, vision=False, output_format="anthropic")
    with store:
        data = inspect_store(store, recipe)
    page = render_html(data)
    parsed = _parse(page)
    tags = [tag for tag, _attrs in parsed.tags]
    assert "script" not in tags and "img" not in tags and "h1" in tags
    assert tags.count("style") == 1 and tags.count("h1") == 1  # no injected style or heading
    for attrs in (a for _t, a in parsed.tags):
        assert not any(name.startswith("on") for name in attrs)
    for hostile in HOSTILE[:4]:
        assert hostile not in page
    assert escape(HOSTILE[0]) in page  # shown, as text
    assert "</style><style>" not in page.split("</head>", 1)[1]
    assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]", page)
    shown_text = "".join(parsed.text)
    assert "<script>document.title='owned'</script>" in shown_text  # what a person reads
    # every shown text is bounded, cut with a marker saying how much was left out
    assert all(len(m.preview) <= PREVIEW_LIMIT + 60 for m in data.messages)
    assert data.ledger is not None and len(data.ledger) <= TEXT_LIMIT + 60
    cut = [m for m in data.messages if "more characters]" in m.preview]
    assert cut, "the long tool outputs of the live window are cut"
    assert len(page) < 400_000


def test_truncate_keeps_short_text_and_marks_what_it_cuts() -> None:
    assert truncate("short", 10) == "short"
    assert truncate(HUGE, 100) == HUGE[:100] + f"… [truncated: {len(HUGE) - 100:,} more characters]"
    assert escape("a\r\nb\x00c\ud800") == "a\nb\ufffdc\ufffd"
    assert escape("<&\"'>") == "&lt;&amp;&quot;&#x27;&gt;"
    assert terminal_safe("red\x1b[31m\r\nbell\x07\ttab\ud800") == "red\\x1b[31m\nbell\\x07\ttab\\ud800"


def test_page_has_every_shown_summary_and_the_composition_table_adds_up() -> None:
    store, recipe, compiled = hostile_store(":memory:", 6000)
    with store:
        data = inspect_store(store, recipe)
    page = render_html(data)
    parsed = _parse(page)
    ids = [int(a["data-summary-id"] or 0) for t, a in parsed.tags if t == "section" and "data-summary-id" in a]
    assert ids == [s.id for s in compiled.summaries] and len(ids) >= 2
    rows = [int(a["data-tokens"] or 0) for t, a in parsed.tags if t == "tr" and a.get("class") == "part"]
    assert sum(rows) == compiled.tokens
    assert f"equal to the request's {compiled.tokens:,} tokens" in page
    assert "http://" not in page and "https://" not in page and "<link" not in page


def test_find_summary_names_the_ids_there_are(tmp_path: Path) -> None:
    store, _recipe, compiled = hostile_store(tmp_path / "s.db", 6000)
    with store:
        first = compiled.summaries[0]
        assert find_summary(store, first.id) == first
        with pytest.raises(UnknownSummary, match=r"no summary with id 9999 in .*s\.db: the store holds \d+ summaries"):
            find_summary(store, 9999)
    with Store(":memory:") as empty, pytest.raises(LookupError, match="holds no summaries"):
        find_summary(empty, 1)


# -- the commands ----------------------------------------------------------------------


@pytest.fixture
def store_file(tmp_path: Path) -> Path:
    path = tmp_path / "agent.db"
    store, _recipe, _compiled = hostile_store(path, 8000, vision=False)
    store.close()
    return path


def test_inspect_command_writes_the_page_and_the_json(store_file: Path, tmp_path: Path) -> None:
    page = tmp_path / "out.html"
    runner = CliRunner()
    result = runner.invoke(main, ["inspect", "--store", str(store_file), "--budget", "8000", "--vision", "false",
                                  "--html", str(page)])
    assert result.exit_code == 0, result.output
    with Store(store_file, create=False) as store:
        expected = inspect_store(store, Recipe(budget_tokens=8000, vision=False))
    assert result.output.startswith(f"wrote {page}: {expected.tokens:,} of 8,000 tokens, ")
    assert page.read_text("utf-8") == render_html(expected)
    result = runner.invoke(main, ["inspect", "--store", str(store_file), "--budget", "8000", "--vision", "false",
                                  "--json"])
    assert result.exit_code == 0
    assert json.loads(result.output) == json.loads(json.dumps(expected.to_dict()))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["inspect", "--store", "{missing}", "--budget", "1000", "--json"], "no store there"),
        (["inspect", "--store", "{store}", "--budget", "10", "--json"], "cannot fit the budget of 10 tokens"),
        (["inspect", "--store", "{store}"], "say what to write: --html FILE, --json, or both"),
        (["inspect", "--store", "{store}", "--budget", "0", "--json"], "Invalid value for '--budget'"),
        (["show", "--store", "{store}", "9999"], "no summary with id 9999"),
        (["show", "--store", "{store}", "--seq", "500"], "--seq 500: no such message"),
        (["show", "--store", "{store}"], "give either a SUMMARY_ID or --seq N"),
        (["show", "--store", "{missing}", "1"], "no store there"),
    ],
)
def test_bad_input_gets_one_clear_line(store_file: Path, tmp_path: Path, args: list[str], message: str) -> None:
    args = [a.format(store=store_file, missing=tmp_path / "missing.db") for a in args]
    result = CliRunner().invoke(main, args)
    assert result.exit_code in (1, 2)
    assert message in result.output
    if result.exit_code == 1:
        assert result.output.count("\n") == 1 and result.output.startswith("compaction: error: ")


def test_show_prints_a_summary_and_a_message(store_file: Path) -> None:
    with Store(store_file, create=False) as store:
        summary = store.summaries()[-1]
    runner = CliRunner()
    result = runner.invoke(main, ["show", "--store", str(store_file), str(summary.id)])
    assert result.exit_code == 0
    assert result.output.startswith(
        f"summary #{summary.id} · L{summary.level} · messages {summary.start_seq}–{summary.end_seq - 1}"
    )
    assert terminal_safe(truncate(summary.text)) in result.output
    assert "\x1b" not in result.output and "\x00" not in result.output  # no escape sequence reaches a terminal
    assert all(f"{k}: {v}" in result.output for k, v in summary.provenance.items())
    data = json.loads(runner.invoke(main, ["show", "--store", str(store_file), str(summary.id), "--json"]).output)
    assert (data["id"], data["level"], data["start_seq"], data["end_seq"]) == (
        summary.id, summary.level, summary.start_seq, summary.end_seq,
    )
    result = runner.invoke(main, ["show", "--store", str(store_file), "--seq", "3"])
    assert result.exit_code == 0
    assert result.output.startswith(f"message 3 · user · 1 blocks · {len(HUGE):,} characters")
    assert "HUGE-xxx" in result.output and "more characters]" in result.output and "-END" not in result.output
    result = runner.invoke(main, ["show", "--store", str(store_file), "--seq", "3", "--full"])
    assert result.output.rstrip("\n").endswith("-END")
